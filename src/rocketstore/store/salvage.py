"""Salvage: find the intact records in what recovery set aside and append them again.

Theory of operation. A quarantine piece (``store.quarantine``) is raw CommitLog bytes starting
at a known offset: the damaged record first, then — usually — intact records whose only fault
is standing behind it. ``find_records`` walks the piece: at each candidate position (four bytes
before an occurrence of a message magic code) it decodes a record with the record rule of
``format.record`` and the body CRC; a record that passes is taken and the walk jumps past it,
anything else moves the search on by one byte. Bytes no record covers and that are not zero
are reported as *unsaved* ranges (offset, bytes): the damage itself.

``salvage_store`` appends every record found as a new message (same topic, queue id, body,
flag, transaction type and properties — KEYS, TAGS and UNIQ_KEY included, so clients find
them by key and by message id as before; new CommitLog and queue offsets) through the store's
normal put path, then records the result in the event's manifest (``salvage``). An event
already salvaged is skipped, so running it twice appends nothing twice. The quarantine
folder itself is kept.
"""
from __future__ import annotations

import logging
import os
import time

from ..format.message import Message, MessageExt
from ..format.record import COMPRESSED_FLAG, MULTI_TAGS_FLAG, TRANSACTION_MASK
from . import quarantine
from .damage import PieceScan, find_records

log = logging.getLogger(__name__)
_KEEP_SYS_FLAG = TRANSACTION_MASK | COMPRESSED_FLAG | MULTI_TAGS_FLAG


def as_message(rec: MessageExt) -> Message:
    """A stored record as a message to append again (original properties, new offsets)."""
    return Message(topic=rec.topic, body=rec.body, properties=dict(rec.properties),
                   queue_id=rec.queue_id, flag=rec.flag, sys_flag=rec.sys_flag & _KEEP_SYS_FLAG,
                   born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                   reconsume_times=rec.reconsume_times,
                   prepared_transaction_offset=rec.prepared_transaction_offset)


def scan_event(folder: str, manifest: dict) -> PieceScan:
    total = PieceScan()
    for piece in manifest.get("pieces", []):
        with open(os.path.join(folder, piece["file"]), "rb") as fh:
            data = fh.read()
        got = find_records(data, int(piece["offset"]))
        total.records.extend(got.records)
        total.positions.extend(got.positions)
        total.unsaved.extend(got.unsaved)
    return total


def salvage_store(store, *, dry_run: bool = False) -> list[dict]:
    """Salvage every event of ``store`` (an open ``MessageStore``) not salvaged yet; one result
    dict per event: folder, cut_at, found, appended, failed, unsaved ranges."""
    results = []
    for folder, manifest in quarantine.events(store.cfg.store_path_root_dir):
        res = {"event": os.path.basename(folder), "path": folder,
               "cut_at": manifest.get("cut_at"), "reason": manifest.get("reason")}
        if "error" in manifest:
            res.update(status="unreadable", error=manifest["error"])
            results.append(res)
            continue
        if manifest.get("salvage"):
            res.update(status="already salvaged", **manifest["salvage"])
            results.append(res)
            continue
        scan = scan_event(folder, manifest)
        appended, failed = 0, []
        if not dry_run:
            for rec, at in zip(scan.records, scan.positions):
                r = store.put_message(as_message(rec))
                if r is not None and r.ok:
                    appended += 1
                else:  # e.g. a record whose damage its CRC does not cover (a queue id < 0)
                    failed.append({"offset": at,
                                   "error": getattr(r, "error", None) or str(getattr(r, "status", r))})
        done = {"found": len(scan.records), "appended": appended, "failed": failed,
                "unsaved": [{"offset": o, "bytes": b} for o, b in scan.unsaved],
                "unsaved_bytes": sum(b for _, b in scan.unsaved)}
        res.update(status="dry run" if dry_run else "salvaged", **done)
        if not dry_run:
            manifest["salvage"] = {**done, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime())}
            quarantine.write_manifest(folder, manifest)
            log.warning("salvaged %d of %d record(s) from %s; %d byte(s) unreadable",
                        appended, len(scan.records), folder, done["unsaved_bytes"])
        results.append(res)
    return results
