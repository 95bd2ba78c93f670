import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * RocketMQ 4.9.7's TransactionMQProducer against a broker: TxnProducer NAMESRV GROUP TOPIC N.
 * Sends N transactions of each kind (commit-i, rollback-i, unknown-i); a check answers
 * ROLLBACK for rollback-i and COMMIT for the others. Prints one line per event and DONE once every
 * unknown-i was checked (or after 60 s).
 */
public class TxnProducer {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], group = args[1], topic = args[2];
        int n = Integer.parseInt(args[3]);
        Set<String> checked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(15000);
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                if (body.startsWith("commit")) return LocalTransactionState.COMMIT_MESSAGE;
                if (body.startsWith("rollback")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                System.out.println("CHECK " + body + " " + msg.getTopic() + " " + msg.getTransactionId());
                System.out.flush();
                checked.add(body);
                return body.startsWith("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        try {
            for (String kind : new String[] {"commit", "rollback", "unknown"}) {
                for (int i = 0; i < n; i++) {
                    Message msg = new Message(topic, "Tag" + kind, "key-" + kind + "-" + i,
                        (kind + "-" + i).getBytes(StandardCharsets.UTF_8));
                    SendResult r = producer.sendMessageInTransaction(msg, null);
                    System.out.println("SENT " + kind + "-" + i + " " + r.getSendStatus() + " "
                        + r.getMsgId());
                    System.out.flush();
                }
            }
            long deadline = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < deadline) {
                int got = 0;
                for (int i = 0; i < n; i++) if (checked.contains("unknown-" + i)) got++;
                if (got == n) break;
                Thread.sleep(100);
            }
            Thread.sleep(500);  // let the last END_TRANSACTION (oneway) leave
            System.out.println("DONE");
            System.out.flush();
        } finally {
            producer.shutdown();
        }
    }
}
