// Driver for npm `rocketmq-client-nodejs` (RocketMQ 5.x over gRPC) against rocketstore serve.
// node grpc_node_driver.js ENDPOINT TOPIC GROUP N
// Sends N messages, receives them with a SimpleConsumer, moves the first one's invisible time
// (ChangeInvisibleDuration) and acks everything; prints one JSON line.
// Its queue choice only ever names queue 0 of the route; the server pops every queue anyway.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoints, topic, group, nText] = process.argv.slice(2);
  const n = Number(nText);
  const producer = new Producer({ endpoints, requestTimeout: 10000 });
  await producer.startup();
  const sent = [];
  for (let i = 0; i < n; i++) {
    const r = await producer.send({ topic, tag: 'NodeTag', keys: [`node-${i}`],
      body: Buffer.from(`node-body-${i}`), properties: new Map([['from', 'node']]) });
    sent.push({ i, message_id: r.messageId });
  }

  const consumer = new SimpleConsumer({ endpoints, consumerGroup: group, awaitDuration: 2000,
    requestTimeout: 10000, subscriptions: new Map([[topic, '*']]) });
  await consumer.startup();
  const got = [];
  let changed = false;
  for (let round = 0; round < 30 && got.length < n; round++) {
    const messages = await consumer.receive(16, 20000);
    for (const m of messages) {
      if (!changed) {
        await consumer.changeInvisibleDuration(m, 30000);
        changed = true;
      }
      got.push({ message_id: m.messageId, body: m.body.toString(), tag: m.tag,
        keys: m.keys, attempt: m.deliveryAttempt,
        from: m.properties.get('from') });
      await consumer.ack(m);
    }
  }
  const again = await consumer.receive(16, 20000);
  // no shutdown(): this client version closes its shared log file on the first shutdown and
  // then fails on the next log line; the process exits right after printing
  console.log(JSON.stringify({ sent, got, again: again.length, changed }));
  process.exit(0);
}

main().catch((err) => {
  console.error(err && err.stack || err);
  process.exit(1);
});
