"""Names of the tier's files and RocketMQ's tiered-store metadata JSON.

A file is named ``md5(str(baseOffset))[:8]`` + the base offset in 20 digits (RocketMQ's
``MessageStoreUtil.offset2FileName``); a cluster directory is ``md5(cluster)[:8]_cluster``;
a queue's files live under ``<broker>/<topic>/<queueId>/<COMMIT_LOG|CONSUME_QUEUE|INDEX>``.
The metadata (``DefaultMetadataStore``'s ``<store>/config/tieredStoreMetadata.json``) is
fastjson of the store's tables, keys sorted: ``commitLogFileSegmentTable``,
``consumeQueueFileSegmentTable``, ``indexFileSegmentTable`` (path -> base offset -> segment),
``queueMetadataTable`` (topic -> queue id -> queue), ``topicMetadataTable``,
``topicSerialNumber``. It is a summary for operators and RocketMQ: the files themselves are
the truth (``flat.FlatQueue.recover``).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

COMMIT_LOG = "COMMIT_LOG"
CONSUME_QUEUE = "CONSUME_QUEUE"
INDEX = "INDEX"
FILE_TYPES = {COMMIT_LOG: 0, CONSUME_QUEUE: 1, INDEX: 2}  # FileSegmentType codes
INDEX_TOPIC = "rmq_sys_INDEX"
CQ_UNIT = 20
METADATA_FILE = "tieredStoreMetadata.json"
_NAME = re.compile(r"^[0-9a-f]{8}(\d{20})$")


def md5_8(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()[:8]


def file_name(base_offset: int) -> str:
    return md5_8(str(base_offset)) + "%020d" % base_offset


def parse_file_name(name: str) -> int | None:
    m = _NAME.match(name)
    if m is None or md5_8(str(int(m.group(1)))) != name[:8]:
        return None
    return int(m.group(1))


def cluster_dir(cluster: str) -> str:
    return f"{md5_8(cluster)}_{cluster}"


def queue_path(broker: str, topic: str, queue_id: int) -> str:
    """``MessageStoreUtil.toFilePath``: what the metadata calls a flat file's path."""
    return f"{broker}/{topic}/{queue_id}"


def segment_key(cluster: str, queue: str, file_type: str, base_offset: int) -> str:
    """A segment's key relative to the tier's base (a path below it, an object key below the
    prefix)."""
    return f"{cluster_dir(cluster)}/{queue}/{file_type}/{file_name(base_offset)}"


@dataclass
class SegmentInfo:
    path: str  # the queue path
    file_type: str
    base_offset: int
    size: int
    begin_timestamp: int = 0
    end_timestamp: int = 0
    create_timestamp: int = 0
    sealed: bool = False

    def to_json(self) -> dict:
        return {"baseOffset": self.base_offset, "beginTimestamp": self.begin_timestamp,
                "createTimestamp": self.create_timestamp, "endTimestamp": self.end_timestamp,
                "path": self.path, "sealTimestamp": self.end_timestamp if self.sealed else 0,
                "size": self.size, "status": 2 if self.sealed else 0,
                "type": FILE_TYPES[self.file_type]}


def metadata_json(broker: str, topics: dict[str, int], queues: list[tuple[str, int, int, int]],
                  segments: list[SegmentInfo], now_ms: int,
                  reserve: dict[str, int] | None = None) -> str:
    """``DefaultMetadataStore.encode(true)``'s shape. ``topics``: topic -> topic id;
    ``queues``: (topic, queue id, min offset, max offset); ``reserve``: topic -> hours kept
    (``TopicMetadata.reserveTime``, -1 for the broker-wide default)."""
    reserve = reserve or {}
    tables: dict[str, dict] = {"commitLogFileSegmentTable": {}, "consumeQueueFileSegmentTable": {},
                               "indexFileSegmentTable": {}}
    names = {COMMIT_LOG: "commitLogFileSegmentTable", CONSUME_QUEUE: "consumeQueueFileSegmentTable",
             INDEX: "indexFileSegmentTable"}
    for seg in segments:
        tables[names[seg.file_type]].setdefault(seg.path, {})[str(seg.base_offset)] = seg.to_json()
    qt: dict[str, dict] = {}
    for topic, qid, lo, hi in queues:
        qt.setdefault(topic, {})[str(qid)] = {
            "maxOffset": hi, "minOffset": lo, "updateTimestamp": now_ms,
            "queue": {"brokerName": broker, "queueId": qid, "topic": topic}}
    doc = dict(tables)
    doc["queueMetadataTable"] = qt
    doc["topicMetadataTable"] = {t: {"reserveTime": reserve.get(t, -1), "status": 0, "topic": t, "topicId": tid,
                                     "updateTimestamp": now_ms} for t, tid in topics.items()}
    doc["topicSerialNumber"] = max(topics.values(), default=0)
    return json.dumps(doc, sort_keys=True, indent="\t")


LOCATION_FILE = "tieredStoreLocation.json"  # beside the metadata: where the tier is


def location_doc(tcfg) -> dict:
    return {"backend": tcfg.backend, "tieredStoreFilePath": tcfg.file_path,
            "brokerClusterName": tcfg.broker_cluster_name, "brokerName": tcfg.broker_name,
            "objectStoreEndpoint": tcfg.object_store_endpoint,
            "objectStoreBucket": tcfg.object_store_bucket,
            "objectStoreRegion": tcfg.object_store_region}
