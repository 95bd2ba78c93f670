// Reads a tier with RocketMQ 5.3.3's own tiered-store classes (test_tier_java): the metadata
// (DefaultMetadataStore), the flat files (FlatFileStore / FlatMessageFile over PosixFileSegment),
// then one message per queue offset. Prints "range <min> <max>" and "msg <queueOffset> <body>".
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tieredstore.MessageStoreConfig;
import org.apache.rocketmq.tieredstore.MessageStoreExecutor;
import org.apache.rocketmq.tieredstore.file.FlatFileStore;
import org.apache.rocketmq.tieredstore.file.FlatMessageFile;
import org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore;

public class TierRead {
    public static void main(String[] args) throws Exception {
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setStorePathRootDir(args[0]);
        cfg.setTieredStoreFilePath(args[1]);
        cfg.setBrokerClusterName(args[2]);
        cfg.setBrokerName(args[3]);
        cfg.setTieredBackendServiceProvider("org.apache.rocketmq.tieredstore.provider.PosixFileSegment");
        MessageStoreExecutor executor = new MessageStoreExecutor();
        DefaultMetadataStore meta = new DefaultMetadataStore(cfg);
        FlatFileStore store = new FlatFileStore(cfg, meta, executor);
        if (!store.load()) {
            throw new IllegalStateException("FlatFileStore.load failed");
        }
        FlatMessageFile flat = store.getFlatFile(new MessageQueue(args[4], args[3], Integer.parseInt(args[5])));
        if (flat == null) {
            throw new IllegalStateException("no flat file for the queue");
        }
        long min = flat.getConsumeQueueMinOffset(), max = flat.getConsumeQueueCommitOffset();
        System.out.println("range " + min + " " + max + " " + flat.getCommitLogCommitOffset());
        for (long i = min; i < max; i++) {
            ByteBuffer buf = flat.getMessageAsync(i).join();
            MessageExt m = MessageDecoder.decode(buf, true, false);
            System.out.println("msg " + m.getQueueOffset() + " " + m.getCommitLogOffset() + " "
                + new String(m.getBody(), StandardCharsets.UTF_8));
        }
        store.shutdown();
        executor.shutdown();
        System.exit(0);
    }
}
