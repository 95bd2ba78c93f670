// Queries the INDEX flat file of a tier with RocketMQ 5.3.3's own classes (test_tier_java):
// IndexStoreService over the metadata and PosixFileSegment, then each hit's record from the
// queue's flat COMMIT_LOG. Args: storeRoot tierPath cluster broker hashSlots topic key...
// Prints "hit <key> <queueId> <flatOffset> <size> <body>" per item returned.
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tieredstore.MessageStoreConfig;
import org.apache.rocketmq.tieredstore.MessageStoreExecutor;
import org.apache.rocketmq.tieredstore.file.FlatFileFactory;
import org.apache.rocketmq.tieredstore.file.FlatFileStore;
import org.apache.rocketmq.tieredstore.file.FlatMessageFile;
import org.apache.rocketmq.tieredstore.index.IndexItem;
import org.apache.rocketmq.tieredstore.index.IndexStoreService;
import org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore;
import org.apache.rocketmq.tieredstore.util.MessageStoreUtil;

public class TierIndexQuery {
    public static void main(String[] args) throws Exception {
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setStorePathRootDir(args[0]);
        cfg.setTieredStoreFilePath(args[1]);
        cfg.setBrokerClusterName(args[2]);
        cfg.setBrokerName(args[3]);
        cfg.setTieredStoreIndexFileMaxHashSlotNum(Integer.parseInt(args[4]));
        cfg.setTieredStoreIndexFileMaxIndexNum(Integer.parseInt(args[4]) * 4);
        cfg.setTieredBackendServiceProvider("org.apache.rocketmq.tieredstore.provider.PosixFileSegment");
        MessageStoreExecutor executor = new MessageStoreExecutor();
        DefaultMetadataStore meta = new DefaultMetadataStore(cfg);
        FlatFileStore store = new FlatFileStore(cfg, meta, executor);
        if (!store.load()) {
            throw new IllegalStateException("FlatFileStore.load failed");
        }
        IndexStoreService index = new IndexStoreService(new FlatFileFactory(meta, cfg, executor),
            MessageStoreUtil.getIndexFilePath(args[3]), false);
        index.start();
        String topic = args[5];
        for (int a = 6; a < args.length; a++) {
            List<IndexItem> items = index.queryAsync(topic, args[a], 1000, 0, Long.MAX_VALUE).join();
            for (IndexItem it : items) {
                FlatMessageFile flat = store.getFlatFile(new MessageQueue(topic, args[3], it.getQueueId()));
                ByteBuffer buf = flat.getCommitLogAsync(it.getOffset(), it.getSize()).join();
                MessageExt m = MessageDecoder.decode(buf, true, false);
                System.out.println("hit " + args[a] + " " + it.getQueueId() + " " + it.getOffset() + " "
                    + it.getSize() + " " + new String(m.getBody(), StandardCharsets.UTF_8));
            }
        }
        index.shutdown();
        store.shutdown();
        executor.shutdown();
        System.exit(0);
    }
}
