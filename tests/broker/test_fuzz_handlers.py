"""Fuzz the request handlers: any header fields and body on any known code get an answer
(never a crash, never a dropped connection), and the broker keeps serving."""
from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import StoreConfig
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.wiring import Broker
from rocketstore.client._sync import LoopThread
from rocketstore.client.transport import RemotingClient
from rocketstore.remoting import RemotingCommand, RequestCode

CODES = [c.value for c in RequestCode if c != RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
FIELD_NAMES = ["topic", "queueId", "queueOffset", "consumerGroup", "maxMsgNums", "sysFlag",
               "commitOffset", "suspendTimeoutMillis", "subscription", "offset", "group",
               "delayLevel", "key", "maxNum", "beginTimestamp", "endTimestamp", "timestamp",
               "properties", "batch", "b", "e", "i", "m", "readQueueNums", "writeQueueNums",
               "perm", "clientID", "expressionType", "defaultTopicQueueNums"]
values = st.one_of(st.text(max_size=12), st.integers(-2**40, 2**40).map(str),
                   st.sampled_from(["", "0", "1", "-1", "true", "null", "*", "T", "A || B",
                                    "%RETRY%g", "TAGS\x01A\x02", "9" * 30]))
bodies = st.one_of(st.binary(max_size=64), st.sampled_from([
    b"", b"{}", b"[]", b"null", json.dumps({"consumerDataSet": [{"groupName": "g"}]}).encode(),
    json.dumps({"consumerGroup": "g", "mqSet": [{"topic": "T", "queueId": "x"}]}).encode(),
    b"\x00\x00\x00\x10" + b"\x00" * 12]))


def test_any_fields_on_any_code_get_an_answer(tmp_path):
    lt = LoopThread.shared()
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                      mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                      max_index_num=4000, store_host="127.0.0.1:0")

    async def start():
        b = Broker(cfg, BrokerConfig(port=0, namesrv_port=None, long_polling_enable=False,
                                     short_polling_time_ms=10))
        await b.start()
        b.topics.create("T", 2)
        c = RemotingClient(f"127.0.0.1:{b.config.port}")
        await c.connect()
        return b, c
    broker, client = lt.run(start())

    @settings(max_examples=300, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(code=st.sampled_from(CODES), fields=st.dictionaries(st.sampled_from(FIELD_NAMES),
                                                                values, max_size=8),
           body=bodies)
    def one(code, fields, body):
        resp = lt.run(client.invoke(RemotingCommand.request(code, fields, body), 10))
        assert resp.is_response and isinstance(resp.code, int)
        assert all(isinstance(v, str) for v in resp.ext_fields.values())

    try:
        one()
        # still serving normally afterwards
        ok = lt.run(client.invoke(RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})))
        assert ok.code == 0
    finally:
        async def stop():
            client.close()
            await broker.stop()
        lt.run(stop())
