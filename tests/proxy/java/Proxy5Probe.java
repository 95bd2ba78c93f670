import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * RocketMQ's 5.x gRPC client (rocketmq-client-java) through RocketMQ's proxy in cluster mode:
 * each scenario prints "PASS name" or "FAIL name why". Its topics are made on one broker of the
 * cluster (brokerName; RocketMQ 5.3.3's admin client, topic attribute message.type), its groups
 * on all. The test runs it for the Java 5.3.3 broker and for the rocketstore broker of one
 * cluster behind one proxy, and compares the lines.
 *
 * args: proxyEndpoint namesrv brokerName suffix [scenario,scenario...]
 */
public class Proxy5Probe {
    static ClientServiceProvider provider;
    static ClientConfiguration cc;
    static DefaultMQAdminExt admin;
    static String addr, suffix;

    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(3);
        }
    }

    static void run(String[] args) throws Exception {
        String endpoint = args[0], namesrv = args[1], brokerName = args[2];
        suffix = args[3];
        admin = new DefaultMQAdminExt("Proxy5ProbeAdmin" + suffix);
        admin.setNamesrvAddr(namesrv);
        admin.start();
        for (int i = 0; i < 60 && addr == null; i++) { // the broker registers a moment after it listens
            ClusterInfo ci = admin.examineBrokerClusterInfo();
            BrokerData bd = ci.getBrokerAddrTable() == null ? null : ci.getBrokerAddrTable().get(brokerName);
            if (bd != null) {
                addr = bd.getBrokerAddrs().get(0L);
            } else {
                Thread.sleep(500);
            }
        }
        if (addr == null) {
            System.out.println("NOBROKER");
            System.exit(2);
        }
        provider = ClientServiceProvider.loadService();
        cc = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        String[] only = args.length > 4 ? args[4].split(",") : null;
        Map<String, Callable<String>> features = new LinkedHashMap<>();
        features.put("normal", Proxy5Probe::normal);
        features.put("fifo", Proxy5Probe::fifo);
        features.put("delay", Proxy5Probe::delay);
        features.put("transaction", Proxy5Probe::transaction);
        features.put("change_invisible", Proxy5Probe::changeInvisible);
        features.put("tag_filter", Proxy5Probe::tagFilter);
        features.put("sql_filter", Proxy5Probe::sqlFilter);
        features.put("push_consumer", Proxy5Probe::push);
        features.put("retry_to_dlq", Proxy5Probe::dlq);
        // benchmarks/bench_pop.py: only when named
        features.put("bench_pop", Proxy5Probe::benchPop);
        // the retry scenario waits on the broker's revive most of its time: it runs beside the others
        ExecutorService side = Executors.newSingleThreadExecutor();
        List<Future<?>> waits = new ArrayList<>();
        for (Map.Entry<String, Callable<String>> f : features.entrySet()) {
            if (only != null && !Arrays.asList(only).contains(f.getKey())) continue;
            if (f.getKey().equals("retry_to_dlq")) {
                waits.add(side.submit(() -> runOne(f.getKey(), f.getValue())));
            }
        }
        for (Map.Entry<String, Callable<String>> f : features.entrySet()) {
            if (only != null && !Arrays.asList(only).contains(f.getKey())) continue;
            if (only == null && f.getKey().startsWith("bench_")) continue;
            if (!f.getKey().equals("retry_to_dlq")) runOne(f.getKey(), f.getValue());
        }
        for (Future<?> w : waits) w.get();
        side.shutdown();
        admin.shutdown();
        System.out.println("DONE");
        System.exit(0);
    }

    static void runOne(String name, Callable<String> scenario) {
        String why;
        long t0 = System.currentTimeMillis();
        try {
            why = scenario.call();
        } catch (Throwable t) {
            why = t.toString().replace('\n', ' ');
        }
        long ms = System.currentTimeMillis() - t0;
        synchronized (Proxy5Probe.class) {
            System.out.println(why == null ? "PASS " + name + " " + ms + "ms" : "FAIL " + name + " " + why);
            System.out.flush();
        }
    }

    // -- helpers ---------------------------------------------------------------------------------
    static String topic(String f, String type) throws Exception {
        String t = "PxT_" + f + "_" + suffix;
        TopicConfig tc = new TopicConfig(t, 2, 2, 6);
        Map<String, String> attrs = new HashMap<>();
        attrs.put("+message.type", type);
        tc.setAttributes(attrs);
        admin.createAndUpdateTopicConfig(addr, tc);
        return t;
    }

    static String group(String f, boolean orderly, int retryMaxTimes) throws Exception {
        String g = "PxG_" + f + "_" + suffix;
        SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
        sg.setGroupName(g);
        sg.setConsumeMessageOrderly(orderly);
        sg.setRetryMaxTimes(retryMaxTimes);
        // on every broker of the cluster, as `mqadmin updateSubGroup -c` does: the proxy reads a
        // group's config from any one of them
        for (BrokerData bd : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
            admin.createAndUpdateSubscriptionGroupConfig(bd.getBrokerAddrs().get(0L), sg);
        }
        return g;
    }

    static Producer producer(String t) throws Exception {
        return provider.newProducerBuilder().setClientConfiguration(cc).setTopics(t).build();
    }

    static MessageBuilder msg(String t, String body) {
        return provider.newMessageBuilder().setTopic(t).setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    static SimpleConsumer simple(String g, String t, FilterExpression fe) throws Exception {
        return provider.newSimpleConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(g)
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(t, fe)).build();
    }

    static String body(MessageView mv) {
        return StandardCharsets.UTF_8.decode(mv.getBody()).toString();
    }

    /** Receives until ``want`` messages came (or ``ms`` passed), acking each; the bodies in order. */
    static List<String> drain(SimpleConsumer c, int want, long ms) throws Exception {
        List<String> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + ms;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (MessageView mv : c.receive(16, Duration.ofSeconds(20))) {
                got.add(body(mv));
                c.ack(mv);
            }
        }
        return got;
    }

    static String expect(Collection<String> want, Collection<String> got) {
        return new TreeSet<>(want).equals(new TreeSet<>(got)) && want.size() == got.size()
            ? null : "want " + want + " got " + got;
    }

    // -- scenarios -------------------------------------------------------------------------------
    /** POP receive+ack throughput through the proxy: BENCH_N (system property, default 2000)
     *  1 KiB messages sent first (8 sends in flight), then BENCH_CONSUMERS SimpleConsumers (default
     *  4) receive 32 at a time and ack each (async) until all are acked; prints
     *  "BENCH pop n=N send_ms=... recv_ack_ms=...". */
    static String benchPop() throws Exception {
        int n = Integer.getInteger("BENCH_N", 2000), consumers = Integer.getInteger("BENCH_CONSUMERS", 4);
        String t = topic("bench", "NORMAL"), g = group("bench", false, 16);
        byte[] kb = new byte[1024];
        Arrays.fill(kb, (byte) 'x');
        List<SimpleConsumer> cs = new ArrayList<>();
        for (int i = 0; i < consumers; i++) cs.add(simple(g, t, FilterExpression.SUB_ALL));
        long t0 = System.currentTimeMillis();
        try (Producer p = producer(t)) {
            Semaphore inflight = new Semaphore(8);
            List<CompletableFuture<?>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                inflight.acquire();
                CompletableFuture<?> f = p.sendAsync(provider.newMessageBuilder().setTopic(t).setBody(kb).build())
                    .whenComplete((r, e) -> inflight.release());
                fs.add(f);
            }
            for (CompletableFuture<?> f : fs) f.get(60, TimeUnit.SECONDS);
        }
        long sendMs = System.currentTimeMillis() - t0;
        AtomicInteger acked = new AtomicInteger();
        // the clock stops at the last ack: a consumer still long-polling an empty topic then
        // (the proxy holds a receive at least 5 s) is not counted as receive+ack time
        AtomicLong lastAckAt = new AtomicLong();
        Set<String> seen = ConcurrentHashMap.newKeySet();
        ExecutorService pool = Executors.newFixedThreadPool(consumers);
        long t1 = System.currentTimeMillis();
        long deadline = t1 + 300000;
        List<Future<?>> runs = new ArrayList<>();
        for (SimpleConsumer c : cs) {
            runs.add(pool.submit(() -> {
                while (acked.get() < n && System.currentTimeMillis() < deadline) {
                    List<CompletableFuture<Void>> acks = new ArrayList<>();
                    for (MessageView mv : c.receive(32, Duration.ofSeconds(60))) {
                        seen.add(mv.getMessageId().toString());
                        acks.add(c.ackAsync(mv).thenRun(() -> {
                            if (acked.incrementAndGet() == n) lastAckAt.set(System.currentTimeMillis());
                        }));
                    }
                    for (CompletableFuture<Void> a : acks) a.get(30, TimeUnit.SECONDS);
                }
                return null;
            }));
        }
        for (Future<?> r : runs) r.get();
        long recvMs = (lastAckAt.get() > 0 ? lastAckAt.get() : System.currentTimeMillis()) - t1;
        pool.shutdown();
        for (SimpleConsumer c : cs) c.close();
        System.out.println("BENCH pop n=" + n + " consumers=" + consumers + " send_ms=" + sendMs
            + " recv_ack_ms=" + recvMs + " distinct=" + seen.size());
        return seen.size() == n ? null : "received " + seen.size() + " of " + n;
    }

    static String normal() throws Exception {
        String t = topic("normal", "NORMAL"), g = group("normal", false, 16);
        SimpleConsumer c = simple(g, t, FilterExpression.SUB_ALL);
        List<String> want = new ArrayList<>();
        try (Producer p = producer(t)) {
            for (int i = 0; i < 4; i++) {
                want.add("n" + i);
                p.send(msg(t, "n" + i).setTag("A").setKeys("k" + i).build());
            }
        }
        List<String> got = drain(c, 4, 30000);
        c.close();
        return expect(want, got);
    }

    static String fifo() throws Exception {
        String t = topic("fifo", "FIFO"), g = group("fifo", true, 16);
        SimpleConsumer c = simple(g, t, FilterExpression.SUB_ALL);
        List<String> want = new ArrayList<>();
        try (Producer p = producer(t)) {
            for (int i = 0; i < 6; i++) {
                want.add("f" + i);
                p.send(msg(t, "f" + i).setMessageGroup("order-1").build());
            }
        }
        List<String> got = drain(c, 6, 40000);
        c.close();
        return want.equals(got) ? null : "want in order " + want + " got " + got;
    }

    static String delay() throws Exception {
        String t = topic("delay", "DELAY"), g = group("delay", false, 16);
        SimpleConsumer c = simple(g, t, FilterExpression.SUB_ALL);
        long due;
        try (Producer p = producer(t)) {
            due = System.currentTimeMillis() + 4000;
            p.send(msg(t, "d0").setDeliveryTimestamp(due).build());
        }
        List<String> got = drain(c, 1, 30000);
        long at = System.currentTimeMillis();
        c.close();
        if (!got.equals(Collections.singletonList("d0"))) return "got " + got;
        return at + 500 >= due ? null : "delivered " + (due - at) + " ms early";
    }

    static String transaction() throws Exception {
        String t = topic("txn", "TRANSACTION"), g = group("txn", false, 16);
        SimpleConsumer c = simple(g, t, FilterExpression.SUB_ALL);
        try (Producer p = provider.newProducerBuilder().setClientConfiguration(cc).setTopics(t)
            .setTransactionChecker(mv -> TransactionResolution.ROLLBACK).build()) {
            Transaction t1 = p.beginTransaction();
            p.send(msg(t, "commit-me").build(), t1);
            Transaction t2 = p.beginTransaction();
            p.send(msg(t, "roll-me-back").build(), t2);
            if (!drain(c, 1, 2000).isEmpty()) return "a half message was delivered before commit";
            t1.commit();
            t2.rollback();
        }
        List<String> got = drain(c, 1, 20000); // then a while for the rolled-back one (never)
        got.addAll(drain(c, 1, 4000));
        c.close();
        return got.equals(Collections.singletonList("commit-me")) ? null : "got " + got;
    }

    static String changeInvisible() throws Exception {
        String t = topic("invis", "NORMAL"), g = group("invis", false, 16);
        SimpleConsumer c = simple(g, t, FilterExpression.SUB_ALL);
        try (Producer p = producer(t)) {
            p.send(msg(t, "i0").build());
        }
        List<MessageView> first = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30000;
        while (first.isEmpty() && System.currentTimeMillis() < deadline) {
            first.addAll(c.receive(1, Duration.ofSeconds(30)));
        }
        if (first.size() != 1) return "first receive got " + first.size();
        c.changeInvisibleDuration(first.get(0), Duration.ofSeconds(2));
        long t0 = System.currentTimeMillis();
        List<MessageView> again = new ArrayList<>();
        while (again.isEmpty() && System.currentTimeMillis() < t0 + 20000) {
            again.addAll(c.receive(1, Duration.ofSeconds(30)));
        }
        if (again.size() != 1 || !body(again.get(0)).equals("i0")) return "again got " + again.size();
        int attempt = again.get(0).getDeliveryAttempt();
        c.ack(again.get(0));
        boolean more = !c.receive(1, Duration.ofSeconds(20)).isEmpty();
        c.close();
        if (attempt != 2) return "delivery attempt " + attempt;
        return more ? "delivered again after its ack" : null;
    }

    static String tagFilter() throws Exception {
        String t = topic("tag", "NORMAL"), g = group("tag", false, 16);
        SimpleConsumer c = simple(g, t, new FilterExpression("A||C", FilterExpressionType.TAG));
        try (Producer p = producer(t)) {
            for (String tag : new String[] {"A", "B", "C", "B"}) {
                p.send(msg(t, "tag-" + tag).setTag(tag).build());
            }
        }
        List<String> got = drain(c, 2, 30000);
        got.addAll(drain(c, 1, 3000)); // what the filter should hold back (never)
        c.close();
        return expect(Arrays.asList("tag-A", "tag-C"), got);
    }

    static String sqlFilter() throws Exception {
        String t = topic("sql", "NORMAL"), g = group("sql", false, 16);
        SimpleConsumer c = simple(g, t, new FilterExpression("a > 1 AND b = 'x'", FilterExpressionType.SQL92));
        try (Producer p = producer(t)) {
            for (int i = 0; i < 4; i++) {
                p.send(msg(t, "sql-" + i).addProperty("a", Integer.toString(i))
                    .addProperty("b", i == 3 ? "y" : "x").build());
            }
        }
        List<String> got = drain(c, 1, 30000);
        got.addAll(drain(c, 1, 3000)); // what the filter should hold back (never)
        c.close();
        return expect(Collections.singletonList("sql-2"), got);
    }

    static String push() throws Exception {
        String t = topic("push", "NORMAL"), g = group("push", false, 16);
        try (Producer p = producer(t)) { // before the group's first pop: it starts at the oldest
            for (int i = 0; i < 5; i++) {
                p.send(msg(t, "p" + i).build());
            }
        }
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(5);
        PushConsumer pc = provider.newPushConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(g)
            .setSubscriptionExpressions(Collections.singletonMap(t, FilterExpression.SUB_ALL))
            .setMessageListener(mv -> {
                if (seen.add(body(mv))) all.countDown();
                return ConsumeResult.SUCCESS;
            }).build();
        boolean ok = all.await(40, TimeUnit.SECONDS);
        pc.close();
        return ok ? expect(Arrays.asList("p0", "p1", "p2", "p3", "p4"), seen) : "consumed " + seen;
    }

    static String dlq() throws Exception {
        String t = topic("dlq", "NORMAL"), g = group("dlq", false, 1);
        try (Producer p = producer(t)) {
            p.send(msg(t, "dead").build());
        }
        AtomicInteger deliveries = new AtomicInteger();
        PushConsumer pc = provider.newPushConsumerBuilder().setClientConfiguration(cc).setConsumerGroup(g)
            .setSubscriptionExpressions(Collections.singletonMap(t, FilterExpression.SUB_ALL))
            .setMessageListener(mv -> {
                deliveries.incrementAndGet();
                return ConsumeResult.FAILURE;
            }).build();
        String dlqTopic = "%DLQ%" + g;
        long deadline = System.currentTimeMillis() + 100000;
        long inDlq = 0;
        while (System.currentTimeMillis() < deadline && inDlq == 0) {
            Thread.sleep(1000);
            try {
                TopicStatsTable st = admin.examineTopicStats(addr, dlqTopic);
                inDlq = st.getOffsetTable().values().stream().mapToLong(o -> o.getMaxOffset()).sum();
            } catch (Exception e) {
                inDlq = 0; // not created yet
            }
        }
        Thread.sleep(2000);
        pc.close();
        if (inDlq != 1) return "DLQ holds " + inDlq + " after " + deliveries.get() + " deliveries";
        return deliveries.get() == 2 ? null : "delivered " + deliveries.get() + " times, want 2";
    }
}
