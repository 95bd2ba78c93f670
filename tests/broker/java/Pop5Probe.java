import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.remoting.protocol.header.PeekMessageRequestHeader;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.protocol.heartbeat.ConsumeType;
import org.apache.rocketmq.remoting.protocol.heartbeat.ConsumerData;
import org.apache.rocketmq.remoting.protocol.heartbeat.HeartbeatData;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.remoting.common.HeartbeatV2Result;
import org.apache.rocketmq.common.message.MessageQueueAssignment;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.NotificationRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.NotificationResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.RecallMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;

/**
 * RocketMQ 5.3.3's remoting client against one broker (given by its name server): each POP
 * feature prints "PASS name" or "FAIL name why"; "CODE what n" lines report answer codes.
 * Run against the Java 5.3.3 broker and against rocketstore; the test compares the lines.
 */
public class Pop5Probe {
    static MQClientAPIImpl api;
    static String addr, brokerName, suffix;
    static DefaultMQProducer producer;

    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(3);
        }
    }

    static void run(String[] args) throws Exception {
        String namesrv = args[0];
        suffix = args.length > 1 ? args[1] : Long.toString(System.currentTimeMillis() % 100000);
        producer = new DefaultMQProducer("PopProbeP" + suffix);
        producer.setNamesrvAddr(namesrv);
        producer.start();
        api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        BrokerData bd = null;
        for (int i = 0; i < 60 && bd == null; i++) { // the broker registers a moment after it listens
            ClusterInfo ci = api.getBrokerClusterInfo(5000);
            if (ci.getBrokerAddrTable() != null && !ci.getBrokerAddrTable().isEmpty()) {
                bd = ci.getBrokerAddrTable().values().iterator().next();
            } else {
                Thread.sleep(500);
            }
        }
        if (bd == null) {
            System.out.println("NOBROKER");
            System.exit(2);
        }
        brokerName = bd.getBrokerName();
        addr = bd.getBrokerAddrs().get(0L);
        System.out.println("BROKER " + brokerName);
        String[] only = args.length > 2 ? args[2].split(",") : null;
        Map<String, Callable<String>> features = new LinkedHashMap<>();
        features.put("pop_ack", Pop5Probe::popAck);
        features.put("batch_ack", Pop5Probe::batchAck);
        features.put("change_invisible", Pop5Probe::changeInvisible);
        features.put("revive_once", Pop5Probe::reviveOnce);
        features.put("orderly_pop", Pop5Probe::orderly);
        features.put("forged_handle", Pop5Probe::forged);
        features.put("notification", Pop5Probe::notification);
        features.put("recall_timer", Pop5Probe::recallTimer);
        features.put("pop_push_consumer", Pop5Probe::popPushConsumer);
        features.put("topic_attributes", Pop5Probe::topicAttributes);
        features.put("heartbeat_v2", Pop5Probe::heartbeatV2);
        // 5.x remoting clients beyond POP (run on their own: "client_" features)
        features.put("client_lite_pull_subscribe", Pop5Probe::litePullSubscribe);
        features.put("client_lite_pull_assign", Pop5Probe::litePullAssign);
        features.put("client_request_reply", Pop5Probe::requestReply);
        features.put("client_peek", Pop5Probe::peek);
        // the two halves of a crash test: pop without ack; (broker killed, restarted) revive
        features.put("crash_pop", Pop5Probe::crashPop);
        features.put("crash_revive", Pop5Probe::crashRevive);
        for (Map.Entry<String, Callable<String>> f : features.entrySet()) {
            if (only == null && (f.getKey().startsWith("crash_") || f.getKey().startsWith("client_"))) continue;
            if (only != null && !Arrays.asList(only).contains(f.getKey())) continue;
            String why;
            try {
                why = f.getValue().call();
            } catch (Throwable t) {
                why = t.toString().replace('\n', ' ');
            }
            System.out.println(why == null ? "PASS " + f.getKey() : "FAIL " + f.getKey() + " " + why);
            System.out.flush();
        }
        producer.shutdown();
        System.out.println("DONE");
        System.exit(0);
    }

    // -- helpers ---------------------------------------------------------------------------------
    static String topic(String f, int queues) throws Exception {
        String t = "PopT_" + f + "_" + suffix;
        TopicConfig tc = new TopicConfig(t, queues, queues, 6);
        api.createTopic(addr, "TBW102", tc, 5000);
        Thread.sleep(200);
        return t;
    }

    static List<String> send(String t, int n, boolean oneQueue) throws Exception {
        List<String> bodies = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String b = t + "-m" + i;
            Message m = new Message(t, "TagA", b.getBytes(StandardCharsets.UTF_8));
            SendResult r;
            if (oneQueue) {
                r = producer.send(m, new MessageQueue(t, brokerName, 0), 5000);
            } else {
                r = producer.send(m, 5000);
            }
            if (r == null) throw new IllegalStateException("send failed");
            bodies.add(b);
        }
        return bodies;
    }

    static PopResult pop(String t, String g, int max, long invisibleMs, long pollMs, boolean order)
        throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(t);
        h.setQueueId(-1);
        h.setMaxMsgNums(max);
        h.setInvisibleTime(invisibleMs);
        h.setPollTime(pollMs);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(1); // ConsumeInitMode.MIN
        h.setExpType("TAG");
        h.setExp("*");
        h.setOrder(order);
        CompletableFuture<PopResult> f = new CompletableFuture<>();
        api.popMessageAsync(brokerName, addr, h, pollMs + 5000, new PopCallback() {
            public void onSuccess(PopResult r) { f.complete(r); }
            public void onException(Throwable e) { f.completeExceptionally(e); }
        });
        return f.get(pollMs + 10000, TimeUnit.MILLISECONDS);
    }

    static List<MessageExt> found(PopResult r) {
        return r.getPopStatus() == PopStatus.FOUND && r.getMsgFoundList() != null
            ? r.getMsgFoundList() : Collections.<MessageExt>emptyList();
    }

    /** Pop until n messages came or timeoutMs passed. */
    static List<MessageExt> popN(String t, String g, int n, long invisibleMs, long timeoutMs,
        boolean order) throws Exception {
        List<MessageExt> out = new ArrayList<>();
        long end = System.currentTimeMillis() + timeoutMs;
        while (out.size() < n && System.currentTimeMillis() < end) {
            long left = Math.max(1000, Math.min(3000, end - System.currentTimeMillis()));
            out.addAll(found(pop(t, g, 32, invisibleMs, left, order)));
        }
        return out;
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static String ck(MessageExt m) {
        return m.getProperty(MessageConst.PROPERTY_POP_CK);
    }

    static int ackCode(String t, String g, MessageExt m, String extraInfo, long offset) throws Exception {
        String[] e = ExtraInfoUtil.split(extraInfo);
        AckMessageRequestHeader h = new AckMessageRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(ExtraInfoUtil.getRealTopic(e, t, g));
        h.setQueueId(ExtraInfoUtil.getQueueId(e));
        h.setExtraInfo(extraInfo);
        h.setOffset(offset);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.ACK_MESSAGE, h);
        return api.getRemotingClient().invokeSync(addr, req, 5000).getCode();
    }

    static int ack(String t, String g, MessageExt m) throws Exception {
        return ackCode(t, g, m, ck(m), ExtraInfoUtil.getQueueOffset(ExtraInfoUtil.split(ck(m))));
    }

    static String expectNone(String t, String g, boolean order, long pollMs) throws Exception {
        List<MessageExt> l = found(pop(t, g, 32, 60000, pollMs, order));
        if (!l.isEmpty()) {
            List<String> b = new ArrayList<>();
            for (MessageExt m : l) b.add(body(m));
            return "unexpected " + b;
        }
        return null;
    }

    static Set<String> bodies(List<MessageExt> l) {
        Set<String> s = new TreeSet<>();
        for (MessageExt m : l) s.add(body(m));
        return s;
    }

    // -- features --------------------------------------------------------------------------------
    static String popAck() throws Exception {
        String t = topic("ack", 2), g = "PopG_ack_" + suffix;
        List<String> sent = send(t, 4, false);
        List<MessageExt> got = popN(t, g, 4, 3000, 10000, false);
        if (!bodies(got).equals(new TreeSet<>(sent))) return "popped " + bodies(got);
        for (MessageExt m : got) {
            if (ck(m) == null) return "no POP_CK on " + body(m);
            int c = ack(t, g, m);
            if (c != 0) return "ack code " + c;
        }
        Thread.sleep(6000);
        return expectNone(t, g, false, 4000);
    }

    static String batchAck() throws Exception {
        String t = topic("batch", 2), g = "PopG_batch_" + suffix;
        List<String> sent = send(t, 4, false);
        List<MessageExt> got = popN(t, g, 4, 3000, 10000, false);
        if (!bodies(got).equals(new TreeSet<>(sent))) return "popped " + bodies(got);
        List<String> infos = new ArrayList<>();
        for (MessageExt m : got) infos.add(ck(m));
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.batchAckMessageAsync(addr, 5000, new AckCallback() {
            public void onSuccess(AckResult r) { f.complete(r); }
            public void onException(Throwable e) { f.completeExceptionally(e); }
        }, t, g, infos);
        AckResult r = f.get(10, TimeUnit.SECONDS);
        if (r.getStatus() != AckStatus.OK) return "batch ack " + r.getStatus();
        Thread.sleep(6000);
        return expectNone(t, g, false, 4000);
    }

    static String changeInvisible() throws Exception {
        String t = topic("chg", 1), g = "PopG_chg_" + suffix;
        send(t, 1, true);
        List<MessageExt> got = popN(t, g, 1, 3000, 10000, false);
        if (got.size() != 1) return "popped " + got.size();
        MessageExt m = got.get(0);
        String[] e = ExtraInfoUtil.split(ck(m));
        ChangeInvisibleTimeRequestHeader h = new ChangeInvisibleTimeRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(ExtraInfoUtil.getRealTopic(e, t, g));
        h.setQueueId(ExtraInfoUtil.getQueueId(e));
        h.setExtraInfo(ck(m));
        h.setOffset(ExtraInfoUtil.getQueueOffset(e));
        h.setInvisibleTime(30000L);
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.changeInvisibleTimeAsync(brokerName, addr, h, 5000, new AckCallback() {
            public void onSuccess(AckResult r) { f.complete(r); }
            public void onException(Throwable x) { f.completeExceptionally(x); }
        });
        AckResult r = f.get(10, TimeUnit.SECONDS);
        if (r.getStatus() != AckStatus.OK) return "change " + r.getStatus();
        Thread.sleep(6000); // past the first invisible time: must stay invisible
        String none = expectNone(t, g, false, 4000);
        if (none != null) return "revived after change: " + none;
        String info = r.getExtraInfo();
        int c = ackCode(t, g, m, info, ExtraInfoUtil.getQueueOffset(ExtraInfoUtil.split(info)));
        if (c != 0) return "ack with the new handle: code " + c;
        return null;
    }

    static String reviveOnce() throws Exception {
        String t = topic("rev", 1), g = "PopG_rev_" + suffix;
        List<String> sent = send(t, 2, true);
        List<MessageExt> got = popN(t, g, 2, 2000, 10000, false);
        if (got.size() != 2) return "popped " + got.size();
        // not acked: each comes back once, as a retry (reconsumeTimes 1)
        List<MessageExt> again = popN(t, g, 2, 60000, 45000, false);
        if (!bodies(again).equals(new TreeSet<>(sent)) || again.size() != 2)
            return "revived " + bodies(again) + " n=" + again.size();
        for (MessageExt m : again) {
            if (m.getReconsumeTimes() != 1) return "reconsumeTimes " + m.getReconsumeTimes();
            if (!t.equals(m.getTopic())) return "topic " + m.getTopic();
            int c = ack(t, g, m);
            if (c != 0) return "ack of a revived message: code " + c;
        }
        retryTopicCode(t, g);
        Thread.sleep(4000);
        return expectNone(t, g, false, 4000);
    }

    /** Where the revived copies went: RocketMQ 5.3.3 keeps them on the pop retry topic
     *  %RETRY%group_topic (KeyBuilder.buildPopRetryTopicV1, enableRetryTopicV2 off). */
    static void retryTopicCode(String t, String g) {
        String what;
        try {
            TopicStatsTable st = api.getTopicStatsInfo(addr, "%RETRY%" + g + "_" + t, 5000);
            what = "messages="
                + st.getOffsetTable().values().stream().mapToLong(o -> o.getMaxOffset()).sum();
        } catch (MQBrokerException e) {
            what = "code=" + e.getResponseCode();
        } catch (Exception e) {
            what = e.getClass().getSimpleName();
        }
        System.out.println("CODE revive_retry_topic " + what);
    }

    /** RocketMQ 5's server-side rebalance: setConsumeMode POP (SET_MESSAGE_REQUEST_MODE, 401), then
     *  a push consumer with clientRebalance(false) asks QUERY_ASSIGNMENT (400) and pops. */
    static String popPushConsumer() throws Exception {
        String t = topic("pushpop", 4), g = "PopG_pushpop_" + suffix;
        List<String> sent = send(t, 6, false);
        System.out.println("CODE set_mode_retry " + setModeCode("%RETRY%" + g, g));
        System.out.println("CODE set_mode_no_topic " + setModeCode("NoSuchTopic_" + suffix, g));
        System.out.println("CODE set_mode " + setModeCode(t, g));
        Set<String> seen = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(g);
        c.setNamesrvAddr(producer.getNamesrvAddr());
        c.setClientRebalance(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setInstanceName("pushpop" + suffix);
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) seen.add(body(m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            long deadline = System.currentTimeMillis() + 40000;
            while (seen.size() < sent.size() && System.currentTimeMillis() < deadline) Thread.sleep(200);
            String cid = c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId();
            TreeSet<String> got = new TreeSet<>();
            Set<MessageQueueAssignment> as = api.queryAssignment(addr, t, g, cid, "AVG",
                MessageModel.CLUSTERING, 5000);
            for (MessageQueueAssignment a : as == null ? Collections.<MessageQueueAssignment>emptySet() : as) {
                got.add(a.getMessageQueue().getQueueId() + ":" + a.getMode());
            }
            System.out.println("CODE assignment " + got);
            if (!seen.equals(new TreeSet<>(sent))) return "consumed " + new TreeSet<>(seen);
            return null;
        } finally {
            c.shutdown();
        }
    }

    /** RocketMQ 5's topic attributes (+message.type=FIFO) kept and read back (GET_TOPIC_CONFIG,
     *  351); bad ones answered with the broker's codes. */
    static String topicAttributes() throws Exception {
        String t = "PopT_attr_" + suffix;
        System.out.println("CODE attr_fifo " + createWith(t, "+message.type", "FIFO"));
        String type = api.getTopicConfig(addr, t, 5000).getTopicMessageType().name();
        System.out.println("CODE attr_unknown_key " + createWith(t + "x", "+no.such.key", "1"));
        System.out.println("CODE attr_bad_value " + createWith(t + "y", "+message.type", "BOGUS"));
        System.out.println("CODE attr_mixed " + createWith(t + "z", "+message.type", "MIXED"));
        System.out.println("CODE attr_missing_topic " + topicConfigCode("NoSuchTopic_" + suffix));
        return "FIFO".equals(type) ? null : "message type read back " + type;
    }

    static String createWith(String t, String key, String value) {
        TopicConfig tc = new TopicConfig(t, 2, 2, 6);
        Map<String, String> attrs = new HashMap<>();
        attrs.put(key, value);
        tc.setAttributes(attrs);
        try {
            api.createTopic(addr, "TBW102", tc, 5000);
            return "0";
        } catch (MQClientException e) {
            return Integer.toString(e.getResponseCode());
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static String topicConfigCode(String t) {
        try {
            api.getTopicConfig(addr, t, 5000);
            return "0";
        } catch (MQBrokerException e) {
            return Integer.toString(e.getResponseCode());
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    /** Heartbeat v2: a fingerprint of the subscriptions; a heartbeat without them keeps them. */
    static String heartbeatV2() throws Exception {
        String t = topic("hb", 1), g = "PopG_hb_" + suffix;
        String cid = "hbv2-client-" + suffix;
        HeartbeatV2Result r1 = api.sendHeartbeatV2(addr, hb(cid, g, t, 1001, false), 5000);
        System.out.println("CODE hb_v2_full support=" + r1.isSupportV2() + " change=" + r1.isSubChange());
        HeartbeatV2Result r2 = api.sendHeartbeatV2(addr, hb(cid, g, t, 1001, true), 5000);
        System.out.println("CODE hb_v2_without_sub support=" + r2.isSupportV2() + " change=" + r2.isSubChange());
        boolean kept = api.getConsumerConnectionList(addr, g, 5000).getSubscriptionTable().containsKey(t);
        System.out.println("CODE hb_v2_sub_kept " + kept);
        HeartbeatV2Result r3 = api.sendHeartbeatV2(addr, hb(cid, g, t, 2002, false), 5000);
        System.out.println("CODE hb_v2_new_fingerprint support=" + r3.isSupportV2() + " change=" + r3.isSubChange());
        api.unregisterClient(addr, cid, null, g, 5000);
        return kept ? null : "the subscription was dropped by a heartbeat without it";
    }

    static HeartbeatData hb(String cid, String g, String t, int fingerprint, boolean withoutSub) {
        ConsumerData cd = new ConsumerData();
        cd.setGroupName(g);
        cd.setConsumeType(ConsumeType.CONSUME_PASSIVELY);
        cd.setMessageModel(MessageModel.CLUSTERING);
        cd.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (!withoutSub) cd.getSubscriptionDataSet().add(new SubscriptionData(t, "*"));
        HeartbeatData h = new HeartbeatData();
        h.setClientID(cid);
        h.getConsumerDataSet().add(cd);
        h.setHeartbeatFingerprint(fingerprint);
        h.setWithoutSub(withoutSub);
        return h;
    }

    static String setModeCode(String t, String g) {
        try {
            api.setMessageRequestMode(addr, t, g, MessageRequestMode.POP, 0, 5000);
            return "0";
        } catch (MQClientException e) {
            return Integer.toString(e.getResponseCode());
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static String orderly() throws Exception {
        String t = topic("ord", 1), g = "PopG_ord_" + suffix;
        List<String> sent = send(t, 3, true);
        List<MessageExt> got = popN(t, g, 3, 3000, 10000, true);
        List<String> order = new ArrayList<>();
        for (MessageExt m : got) order.add(body(m));
        if (!order.equals(sent)) return "first pop " + order;
        if (ExtraInfoUtil.getReviveQid(ExtraInfoUtil.split(ck(got.get(0)))) != 999)
            return "reviveQid " + ck(got.get(0));
        String locked = expectNone(t, g, true, 1000);
        if (locked != null) return "queue not locked: " + locked;
        Thread.sleep(3500);
        List<MessageExt> again = popN(t, g, 3, 3000, 15000, true);
        List<String> order2 = new ArrayList<>();
        for (MessageExt m : again) order2.add(body(m));
        if (!order2.equals(sent)) return "second pop " + order2;
        for (MessageExt m : again) {
            if (m.getReconsumeTimes() != 1) return "reconsumeTimes " + m.getReconsumeTimes();
        }
        for (MessageExt m : again) {
            int c = ack(t, g, m);
            if (c != 0) return "ack code " + c;
        }
        send(t, 1, true);
        List<MessageExt> next = popN(t, g, 1, 3000, 10000, true);
        if (next.size() != 1 || !body(next.get(0)).equals(t + "-m0")) {
            return "after ack " + bodies(next);
        }
        return null;
    }

    static String forged() throws Exception {
        String t = topic("forge", 1), g = "PopG_forge_" + suffix;
        send(t, 1, true);
        List<MessageExt> got = popN(t, g, 1, 3000, 10000, false);
        if (got.size() != 1) return "popped " + got.size();
        MessageExt m = got.get(0);
        String[] e = ExtraInfoUtil.split(ck(m));
        long off = ExtraInfoUtil.getQueueOffset(e);
        // a handle with another pop time, the real handle for another group, an offset out of
        // the queue: none of them may ack the message
        String[] f = e.clone();
        f[1] = Long.toString(Long.parseLong(f[1]) - 12345);
        System.out.println("CODE forged_poptime " + ackCode(t, g, m, String.join(" ", f), off));
        System.out.println("CODE other_group " + ackCode(t, "PopG_other_" + suffix, m, ck(m), off));
        System.out.println("CODE offset_out_of_queue " + ackCode(t, g, m, ck(m), off + 1000));
        String[] q = e.clone();
        q[6] = "7";
        System.out.println("CODE queue_out_of_topic " + codeForQueue(t, g, String.join(" ", q), off, 7));
        List<MessageExt> again = popN(t, g, 1, 60000, 45000, false);
        if (again.size() != 1) return "message not revived after forged acks: " + again.size();
        int c = ack(t, g, again.get(0));
        if (c != 0) return "ack code " + c;
        return null;
    }

    static int codeForQueue(String t, String g, String extra, long off, int qid) throws Exception {
        AckMessageRequestHeader h = new AckMessageRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(t);
        h.setQueueId(qid);
        h.setExtraInfo(extra);
        h.setOffset(off);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.ACK_MESSAGE, h);
        return api.getRemotingClient().invokeSync(addr, req, 5000).getCode();
    }

    static String notification() throws Exception {
        String t = topic("notify", 1), g = "PopG_notify_" + suffix;
        NotificationRequestHeader h = new NotificationRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(t);
        h.setQueueId(-1);
        h.setPollTime(1500);
        h.setBornTime(System.currentTimeMillis());
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.NOTIFICATION, h);
        RemotingCommand r = api.getRemotingClient().invokeSync(addr, req, 6000);
        NotificationResponseHeader rh = (NotificationResponseHeader) r.decodeCommandCustomHeader(NotificationResponseHeader.class);
        if (r.getCode() != 0 || rh.isHasMsg()) return "empty: code " + r.getCode() + " hasMsg " + rh.isHasMsg();
        send(t, 1, true);
        h.setBornTime(System.currentTimeMillis());
        req = RemotingCommand.createRequestCommand(RequestCode.NOTIFICATION, h);
        r = api.getRemotingClient().invokeSync(addr, req, 6000);
        rh = (NotificationResponseHeader) r.decodeCommandCustomHeader(NotificationResponseHeader.class);
        if (r.getCode() != 0 || !rh.isHasMsg()) return "with a message: code " + r.getCode() + " hasMsg " + rh.isHasMsg();
        return null;
    }

    static String crashPop() throws Exception {
        String t = topic("crash", 1), g = "PopG_crash_" + suffix;
        List<String> sent = send(t, 2, true);
        List<MessageExt> got = popN(t, g, 2, 5000, 10000, false);
        if (!bodies(got).equals(new TreeSet<>(sent))) return "popped " + bodies(got);
        return null;
    }

    static String crashRevive() throws Exception {
        String t = "PopT_crash_" + suffix, g = "PopG_crash_" + suffix;
        List<MessageExt> again = popN(t, g, 2, 60000, 45000, false);
        if (again.size() != 2 || bodies(again).size() != 2) return "revived " + bodies(again) + " n=" + again.size();
        for (MessageExt m : again) {
            if (m.getReconsumeTimes() != 1) return "reconsumeTimes " + m.getReconsumeTimes();
            int c = ack(t, g, m);
            if (c != 0) return "ack code " + c;
        }
        Thread.sleep(3000);
        return expectNone(t, g, false, 4000);
    }

    static int recallCode(String t, String handle) throws Exception {
        RecallMessageRequestHeader h = new RecallMessageRequestHeader();
        h.setProducerGroup("PopProbeP" + suffix);
        h.setTopic(t);
        h.setRecallHandle(handle);
        h.setBrokerName(brokerName);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.RECALL_MESSAGE, h);
        return api.getRemotingClient().invokeSync(addr, req, 5000).getCode();
    }

    /** A timer message recalled before it is due is never delivered; its neighbour is. */
    static String recallTimer() throws Exception {
        String t = topic("recall", 1), other = topic("recall2", 1), g = "PopG_recall_" + suffix;
        long at = System.currentTimeMillis() + 5000;
        Message a = new Message(t, "TagA", (t + "-a").getBytes(StandardCharsets.UTF_8));
        a.setDeliverTimeMs(at);
        Message b = new Message(t, "TagA", (t + "-b").getBytes(StandardCharsets.UTF_8));
        b.setDeliverTimeMs(at);
        SendResult ra = producer.send(a, new MessageQueue(t, brokerName, 0), 5000);
        SendResult rb = producer.send(b, new MessageQueue(t, brokerName, 0), 5000);
        if (ra.getRecallHandle() == null || rb.getRecallHandle() == null) return "no recall handle";
        System.out.println("CODE recall_bad_handle " + recallCode(t, "bm90IGEgaGFuZGxl"));
        System.out.println("CODE recall_other_topic " + recallCode(other, ra.getRecallHandle()));
        String id = producer.recallMessage(t, ra.getRecallHandle());
        if (!ra.getMsgId().equals(id)) return "recalled id " + id + " want " + ra.getMsgId();
        List<MessageExt> got = popN(t, g, 1, 60000, 20000, false);
        if (got.size() != 1 || !body(got.get(0)).equals(t + "-b")) return "delivered " + bodies(got);
        int c = ack(t, g, got.get(0));
        if (c != 0) return "ack code " + c;
        String none = expectNone(t, g, false, 3000);
        if (none != null) return "recalled message delivered: " + none;
        System.out.println("CODE recall_delivered " + recallCode(t, rb.getRecallHandle()));
        return null;
    }

    // -- 5.x remoting clients: lite pull, request-reply, peek ---------------------------------------
    static DefaultLitePullConsumer litePull(String g, String instance) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(g);
        c.setNamesrvAddr(producer.getNamesrvAddr());
        c.setInstanceName(instance + suffix);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(false);
        c.setPollTimeoutMillis(500);
        return c;
    }

    /** Poll until n messages came or timeoutMs passed; bodies in the order polled. */
    static List<String> pollN(DefaultLitePullConsumer c, int n, long timeoutMs) {
        List<String> out = new ArrayList<>();
        long end = System.currentTimeMillis() + timeoutMs;
        while (out.size() < n && System.currentTimeMillis() < end) {
            for (MessageExt m : c.poll(500)) out.add(body(m));
        }
        return out;
    }

    /** Subscribe mode: a group's lite-pull consumer reads the topic, commits; a second consumer
     *  of the group starts where the first committed (the broker's offsets). */
    static String litePullSubscribe() throws Exception {
        String t = topic("lps", 2), g = "PopG_lps_" + suffix;
        List<String> sent = send(t, 6, false);
        DefaultLitePullConsumer c = litePull(g, "lps1");
        c.subscribe(t, "*");
        c.start();
        long committed = 0;
        try {
            List<String> got = pollN(c, 6, 30000);
            if (!new TreeSet<>(got).equals(new TreeSet<>(sent)) || got.size() != 6) return "polled " + got;
            c.commitSync();
            Set<MessageQueue> mine = c.assignment();
            c.commit(mine, true);
            for (MessageQueue mq : mine) committed += c.committed(mq);
        } finally {
            c.shutdown();
        }
        if (committed != 6) return "committed " + committed;
        List<String> more = send(t, 2, false);
        DefaultLitePullConsumer c2 = litePull(g, "lps2");
        c2.subscribe(t, "*");
        c2.start();
        try {
            List<String> got = pollN(c2, 2, 15000);
            for (MessageExt m : c2.poll(1000)) got.add(body(m)); // and nothing more
            if (!new TreeSet<>(got).equals(new TreeSet<>(more)) || got.size() != 2) return "second consumer polled " + got;
        } finally {
            c2.shutdown();
        }
        return null;
    }

    /** Assign mode: seek, seekToBegin, commit a chosen offset, read it back. */
    static String litePullAssign() throws Exception {
        String t = topic("lpa", 2), g = "PopG_lpa_" + suffix;
        List<String> sent = send(t, 4, true);
        MessageQueue mq = new MessageQueue(t, brokerName, 0);
        DefaultLitePullConsumer c = litePull(g, "lpa");
        c.start();
        try {
            c.assign(Collections.singletonList(mq));
            c.seek(mq, 2);
            List<String> got = pollN(c, 2, 15000);
            if (!got.equals(sent.subList(2, 4))) {
                // RocketMQ's client starts pulling from the stored offset the moment a queue is
                // assigned: a pull already on the wire when seek() runs may still be delivered
                // (seen on a loaded machine, against Java's broker too). Drain it, seek again.
                for (MessageExt m : c.poll(1000)) got.add(body(m));
                c.seek(mq, 2);
                got = pollN(c, 2, 15000);
            }
            if (!got.equals(sent.subList(2, 4))) return "after seek 2 " + got;
            c.seekToBegin(mq);
            got = pollN(c, 4, 15000);
            if (!got.equals(sent)) return "after seekToBegin " + got;
            Map<MessageQueue, Long> at = new HashMap<>();
            at.put(mq, 3L);
            c.commitSync(at, true);
            long committed = c.committed(mq);
            if (committed != 3) return "committed " + committed;
            System.out.println("CODE lite_pull_min_max " + api.getMinOffset(addr, mq, 5000) + " "
                + api.getMaxOffset(addr, mq, 5000));
            c.seekToEnd(mq);
            List<String> late = send(t, 1, true);
            got = pollN(c, 1, 15000);
            if (!got.equals(late)) return "after seekToEnd " + got;
            try {
                c.seek(new MessageQueue(t, brokerName, 1), 0);
                return "seek on a queue not assigned was accepted";
            } catch (MQClientException e) {
                // as documented: the queue must be assigned first
            }
        } finally {
            c.shutdown();
        }
        return null;
    }

    static volatile MessageExt lastRequest;

    /** DefaultMQProducer.request: a consumer answers with MessageUtil.createReplyMessage on
     *  <cluster>_REPLY_TOPIC (SEND_REPLY_MESSAGE_V2, 325), the broker pushes it to the requester
     *  (PUSH_REPLY_MESSAGE_TO_CLIENT, 326). A reply for a requester that is gone: the code. */
    static String requestReply() throws Exception {
        String t = topic("rr", 1), g = "PopG_rr_" + suffix;
        DefaultMQProducer replier = new DefaultMQProducer("PopProbeReplier" + suffix);
        replier.setNamesrvAddr(producer.getNamesrvAddr());
        replier.setInstanceName("replier" + suffix);
        replier.start();
        CountDownLatch warm = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(g);
        c.setNamesrvAddr(producer.getNamesrvAddr());
        c.setInstanceName("rr" + suffix);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                if (MessageUtil.getReplyToClient(m) == null) {
                    warm.countDown();
                    continue;
                }
                lastRequest = m;
                try {
                    replier.send(MessageUtil.createReplyMessage(m, ("re:" + body(m)).getBytes(StandardCharsets.UTF_8)), 5000);
                } catch (Exception e) {
                    System.out.println("replier failed " + e);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            long t0 = System.currentTimeMillis();
            while (c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty()
                && System.currentTimeMillis() - t0 < 30000) Thread.sleep(100);
            send(t, 1, true); // the consumer is pulling once it got a plain message
            if (!warm.await(30, TimeUnit.SECONDS)) return "the replying consumer got nothing";
            // the broker pushes a reply to the requester's connection, which it knows from the
            // requester's heartbeat (a client sends one at start, every 30 s, and when it meets
            // a new topic's route)
            producer.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();
            for (int i = 0; i < 2; i++) {
                String b = "ping" + i;
                // RocketMQ 5.3.3's request(msg, timeout) returns on the request's send (its latch
                // is counted down by the send callback: a RequestTimeoutException at once), and
                // request(msg, callback, timeout) calls onSuccess(null) then, and onSuccess(reply)
                // when the reply comes: the reply is the first non-null message
                CompletableFuture<Message> reply = new CompletableFuture<>();
                producer.request(new Message(t, "TagA", b.getBytes(StandardCharsets.UTF_8)), new RequestCallback() {
                    public void onSuccess(Message m) { if (m != null) reply.complete(m); }
                    public void onException(Throwable e) { reply.completeExceptionally(e); }
                }, 20000);
                Message r = reply.get(25, TimeUnit.SECONDS);
                if (r == null) return "no reply to " + b;
                if (!("re:" + b).equals(new String(r.getBody(), StandardCharsets.UTF_8)))
                    return "reply body " + new String(r.getBody(), StandardCharsets.UTF_8);
                if (!r.getTopic().endsWith("_REPLY_TOPIC")) return "reply topic " + r.getTopic();
                if (!"reply".equals(r.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE)))
                    return "reply type " + r.getProperty(MessageConst.PROPERTY_MESSAGE_TYPE);
            }
            Message orphan = MessageUtil.createReplyMessage(lastRequest, "late".getBytes(StandardCharsets.UTF_8));
            MessageAccessor.putProperty(orphan, MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT, "gone@" + suffix);
            String code;
            try {
                code = "0 " + replier.send(orphan, 5000).getSendStatus();
            } catch (MQBrokerException e) {
                code = Integer.toString(e.getResponseCode());
            } catch (MQClientException e) { // retried, then given up: the broker's code
                code = Integer.toString(e.getResponseCode());
            }
            System.out.println("CODE reply_requester_gone " + code);
        } finally {
            c.shutdown();
            replier.shutdown();
        }
        return null;
    }

    static RemotingCommand peekCmd(String t, String g, int qid) throws Exception {
        PeekMessageRequestHeader h = new PeekMessageRequestHeader();
        h.setConsumerGroup(g);
        h.setTopic(t);
        h.setQueueId(qid);
        h.setMaxMsgNums(32);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.PEEK_MESSAGE, h);
        return api.getRemotingClient().invokeSync(addr, req, 5000);
    }

    static List<String> peeked(String t, String g, int qid) throws Exception {
        RemotingCommand r = peekCmd(t, g, qid);
        List<String> out = new ArrayList<>();
        if (r.getCode() != 0 || r.getBody() == null) return out;
        for (MessageExt m : MessageDecoder.decodes(ByteBuffer.wrap(r.getBody()))) out.add(body(m));
        return out;
    }

    /** PEEK_MESSAGE (200052, the broker's PeekMessageProcessor; no client method): the records
     *  from where the group's pops stand, nothing popped. */
    static String peek() throws Exception {
        String t = topic("peek", 2), g = "PopG_peek_" + suffix;
        List<String> sent = send(t, 3, true);
        System.out.println("CODE peek_no_topic " + peekCmd("NoSuchTopic_" + suffix, g, -1).getCode());
        System.out.println("CODE peek_bad_queue " + peekCmd(t, g, 5).getCode());
        System.out.println("CODE peek_empty_queue " + peekCmd(t, g, 1).getCode());
        List<String> all = peeked(t, g, -1);
        if (!all.equals(sent)) return "peek -1 " + all;
        List<String> q0 = peeked(t, g, 0);
        if (!q0.equals(sent)) return "peek again, queue 0 " + q0;
        List<MessageExt> got = popN(t, g, 3, 60000, 10000, false);
        if (got.size() != 3) return "popped " + got.size();
        System.out.println("CODE peek_after_pop " + peekCmd(t, g, -1).getCode());
        return null;
    }
}
