import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's own client: SQL92 push (bySql), SQL92 pull, request-reply. Prints sorted
 *  result lines then DONE. Args: namesrv suffix. */
public class SqlReplyClient {
  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }

  static void run(String[] args) throws Exception {
    String ns = args[0], sfx = args[1];
    String topic = "SqlJ" + sfx, svc = "SvcJ" + sfx;
    List<String> out = Collections.synchronizedList(new ArrayList<>());
    DefaultMQProducer p = new DefaultMQProducer("PG_j" + sfx);
    p.setNamesrvAddr(ns);
    p.start();
    // first message creates the topic, so the consumers below find its route
    sendRetrying(p, msg(topic, -1, "none"));
    sendRetrying(p, new Message(svc, "warmup".getBytes()));

    // bad expression: the consumer does not start
    DefaultMQPushConsumer bad = new DefaultMQPushConsumer("G_bad" + sfx);
    bad.setNamesrvAddr(ns);
    bad.subscribe(topic, MessageSelector.bySql("a >"));
    bad.registerMessageListener((MessageListenerConcurrently) (m, c) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
    try { bad.start(); out.add("BADSQL started"); } catch (Exception e) { out.add("BADSQL refused"); }
    bad.shutdown();

    // push consumer with SQL92
    CountDownLatch pushed = new CountDownLatch(4);
    DefaultMQPushConsumer c = new DefaultMQPushConsumer("G_sql" + sfx);
    c.setNamesrvAddr(ns);
    c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
    c.subscribe(topic, MessageSelector.bySql("a BETWEEN 3 AND 5 OR color = 'red'"));
    c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
      for (MessageExt m : msgs) { out.add("PUSH " + new String(m.getBody())); pushed.countDown(); }
      return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    });
    c.start();
    for (int i = 0; i < 20; i++) sendRetrying(p, msg(topic, i, i == 10 ? "red" : "blue"));
    boolean pushOk = pushed.await(90, TimeUnit.SECONDS);
    Thread.sleep(2000);
    c.shutdown();
    out.add("PUSHDONE " + pushOk);

    // pull consumer with SQL92
    DefaultMQPullConsumer pc = new DefaultMQPullConsumer("G_pull" + sfx);
    pc.setNamesrvAddr(ns);
    pc.start();
    // the client checks the broker's version (learnt from heartbeat answers) before a SQL92
    // pull: a tag pull makes this client instance learn the broker, then it heartbeats
    Set<MessageQueue> mqs = pc.fetchSubscribeMessageQueues(topic);
    pc.pull(mqs.iterator().next(), "*", 0, 1);
    BrokerVersions.awaitKnown(pc, mqs);
    for (MessageQueue mq : mqs) {
      long off = 0;
      for (int round = 0; round < 50; round++) {
        PullResult r = pc.pull(mq, MessageSelector.bySql("a >= 15"), off, 32);
        if (r.getPullStatus() == PullStatus.FOUND)
          for (MessageExt m : r.getMsgFoundList()) out.add("PULL " + new String(m.getBody()));
        if (r.getNextBeginOffset() == off || r.getPullStatus() == PullStatus.NO_NEW_MSG) break;
        off = r.getNextBeginOffset();
      }
    }
    pc.shutdown();

    // request-reply: a consumer answers with MessageUtil.createReplyMessage
    DefaultMQProducer responder = new DefaultMQProducer("PG_resp" + sfx);
    responder.setNamesrvAddr(ns);
    responder.start();
    Set<String> answered = ConcurrentHashMap.newKeySet();
    DefaultMQPushConsumer svcC = new DefaultMQPushConsumer("G_svc" + sfx);
    svcC.setNamesrvAddr(ns);
    svcC.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
    svcC.subscribe(svc, "*");
    svcC.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
      for (MessageExt m : msgs) {
        if (m.getProperty("REPLY_TO_CLIENT") == null) continue;
        if (!answered.add(m.getProperty("CORRELATION_ID"))) {
          System.err.println("DUPLICATE request delivery " + m.getMsgId());
          continue;
        }
        try {
          Message reply = MessageUtil.createReplyMessage(m, ("pong:" + new String(m.getBody())).getBytes());
          responder.send(reply, 10000);
        } catch (Exception e) { out.add("REPLYERR " + e); e.printStackTrace(); }
      }
      return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    });
    svcC.start();
    // the broker pushes a reply to the requester's connection, found among producers that
    // heartbeated: make both clients known before the first request
    org.apache.rocketmq.client.impl.MQClientManager.getInstance().getOrCreateMQClientInstance(p)
        .sendHeartbeatToAllBrokerWithLock();
    Thread.sleep(3000);
    for (int i = 0; i < 2; i++) {
      try {
        Message r = p.request(new Message(svc, ("ping" + i).getBytes()), 20000);
        out.add("REPLY " + new String(r.getBody()) + " " + r.getTopic());
      } catch (Exception e) { out.add("REQUESTERR " + e); }
    }
    Thread.sleep(2000);  // the last reply's send returns after the push reached us
    svcC.shutdown();
    responder.shutdown();
    p.shutdown();
    List<String> sorted = new ArrayList<>(out);
    Collections.sort(sorted);
    for (String s : sorted) System.out.println(s);
    System.out.println("DONE");
    System.exit(0);
  }

  static Message msg(String topic, int a, String color) {
    Message m = new Message(topic, "TagA", ("m" + a).getBytes());
    m.putUserProperty("a", String.valueOf(a));
    m.putUserProperty("color", color);
    return m;
  }

  static void sendRetrying(DefaultMQProducer p, Message m) throws Exception {
    Exception last = null;
    for (int i = 0; i < 30; i++) {
      try { p.send(m); return; } catch (Exception e) { last = e; Thread.sleep(1000); }
    }
    throw last;
  }
}
