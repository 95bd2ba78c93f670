// Driver for npm ali-ons@3.12.0 (pure JavaScript RocketMQ 4.x client) against rocketstore serve.
//   node interop_alions.js NODE_MODULES NAMESRV TOPIC GROUP N
// Sends N messages with keys and tags (SEND_MESSAGE_V2), then consumes them with a fresh
// consumer group (heartbeat with enum names, long-polling pulls, oneway offset commits) and
// prints one JSON document: {"sent": [...], "received": [...]}.
'use strict';
const path = require('path');
const [nodeModules, nameSrv, topic, group, nStr] = process.argv.slice(2);
const req = m => require(path.join(nodeModules, m));
const httpclient = req('urllib');
const { Producer, Consumer, Message } = req('ali-ons');
const n = parseInt(nStr, 10);

(async () => {
  const producer = new Producer({ httpclient, nameSrv, producerGroup: 'PG_alions',
    accessKeyId: 'x', accessKeySecret: 'x' });
  await producer.ready();
  const sent = [];
  for (let i = 0; i < n; i++) {
    const msg = new Message(topic, `Tag${i % 2}`, `ali-${i}`);
    msg.keys = [ `akey-${i}` ];
    const r = await producer.send(msg);
    sent.push({ i, status: r.sendStatus, msgId: r.msgId, queueId: r.messageQueue.queueId,
      queueOffset: r.queueOffset });
  }
  await producer.close();

  const received = [];
  const consumer = new Consumer({ httpclient, nameSrv, consumerGroup: group,
    accessKeyId: 'x', accessKeySecret: 'x', persistent: false });
  consumer.on('error', err => console.error('consumer error', err && err.message));
  let resolveDone;
  const done = new Promise(r => { resolveDone = r; });
  consumer.subscribe(topic, '*', async msg => {
    received.push({ msgId: msg.msgId, body: msg.body.toString(), tags: msg.tags,
      keys: msg.keys, queueId: msg.queueId, queueOffset: msg.queueOffset });
    if (received.length >= n) resolveDone();
  });
  await consumer.ready();
  await Promise.race([ done, new Promise(r => setTimeout(r, 60000)) ]);
  await new Promise(r => setTimeout(r, 6000)); // let it commit offsets
  await consumer.close();
  process.stdout.write(JSON.stringify({ sent, received }) + '\n');
  process.exit(0);
})().catch(err => { console.error(err && err.stack || err); process.exit(1); });
