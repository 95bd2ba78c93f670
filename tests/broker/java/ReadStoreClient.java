import java.util.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.common.message.*;

/** Pulls every queue of a topic from a broker by tag and by SQL92; prints sorted bodies. */
public class ReadStoreClient {
  public static void main(String[] args) {
    try { run(args[0], args[1], args[2], args[3]); } catch (Throwable t) { t.printStackTrace(); System.exit(1); }
    System.exit(0);
  }

  static void run(String ns, String topic, String tag, String sql) throws Exception {
    DefaultMQPullConsumer pc = new DefaultMQPullConsumer("G_read");
    pc.setNamesrvAddr(ns);
    pc.start();
    Set<MessageQueue> mqs = null;
    for (int i = 0; i < 60 && mqs == null; i++) {
      try { mqs = pc.fetchSubscribeMessageQueues(topic); } catch (Exception e) { Thread.sleep(1000); }
    }
    List<String> out = new ArrayList<>();
    for (MessageQueue mq : mqs) collect(pc, mq, null, tag, out, "TAG ");
    BrokerVersions.awaitKnown(pc, mqs);
    for (MessageQueue mq : mqs) collect(pc, mq, MessageSelector.bySql(sql), null, out, "SQL ");
    pc.shutdown();
    Collections.sort(out);
    for (String s : out) System.out.println(s);
    System.out.println("DONE");
  }

  static void collect(DefaultMQPullConsumer pc, MessageQueue mq, MessageSelector sel, String tag,
                      List<String> out, String prefix) throws Exception {
    long off = 0;
    for (int round = 0; round < 100; round++) {
      PullResult r = sel != null ? pc.pull(mq, sel, off, 32) : pc.pull(mq, tag, off, 32);
      if (r.getPullStatus() == PullStatus.FOUND)
        for (MessageExt m : r.getMsgFoundList()) out.add(prefix + new String(m.getBody()));
      if (r.getNextBeginOffset() == off || r.getPullStatus() == PullStatus.NO_NEW_MSG) break;
      off = r.getNextBeginOffset();
    }
  }
}
