import java.util.*;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.message.MessageQueue;

/** RocketMQ 4.9.7's client refuses a SQL92 pull until a heartbeat answer told it the broker's
 *  version. sendHeartbeatToAllBrokerWithLock skips when the scheduled heartbeat holds the lock,
 *  and a heartbeat that times out on a loaded machine records nothing: send until it is known. */
public class BrokerVersions {
  static void awaitKnown(DefaultMQPullConsumer pc, Set<MessageQueue> mqs) throws Exception {
    MQClientInstance ci = MQClientManager.getInstance().getOrCreateMQClientInstance(pc);
    for (int i = 0; i < 120; i++) {
      ci.sendHeartbeatToAllBrokerWithLock();
      boolean known = true;
      for (MessageQueue mq : mqs) {
        String addr = ci.findBrokerAddressInPublish(mq.getBrokerName());
        if (addr == null || ci.findBrokerVersion(mq.getBrokerName(), addr) <= 0) known = false;
      }
      if (known) return;
      Thread.sleep(500);
    }
    throw new IllegalStateException("no heartbeat answer from the broker in 60 s");
  }
}
