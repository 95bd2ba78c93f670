"""``verify_store``: a read-only consistency check of a closed store (``rocketstore verify``).

Theory of operation. Three passes over the files, none through the ``MessageStore`` facade
(so a store that would not open can still be checked), each finding reported as a
``Problem(severity, file, offset, what)``:

1. **CommitLog.** Segment names follow each other and every segment has the configured size.
   Each segment is decoded from its start with the batch decoder, body CRC checked: a blank
   record must fill the segment's rest; the data of a non-last segment must end in a blank
   record (unless every later segment is an empty preallocated one: a warning, as RocketMQ's
   allocate-ahead leaves); the last segment's data must end at zeros. A record is valid by
   ``format.record``'s rule (RocketMQ's); a PHYSICALOFFSET other than the record's offset and
   queue offsets that do not grow by one per ``(topic, queue)`` (they restart at 0 when a topic
   is re-created) are *warnings*. Non-zero bytes after the end of data are a *warning*:
   a crash residue that the next open zeroes.
2. **ConsumeQueues.** File names follow each other; every unit between the queue's first real
   unit and its end must point at a record of the CommitLog (or below its min offset: cleaned
   up) with the same size, topic, queue id, queue offset and tags code. Records the queue does
   not cover yet are a warning (dispatch is behind; the next open rebuilds them).
3. **Index files.** indexCount within bounds, zeros after the last entry, a file without entries
   covers no CommitLog range (begin == end); every slot holds its newest entry and every
   ``prevIndex`` the previous entry of the same slot (``putKey``'s chain rule); every entry's
   CommitLog offset is the start of a record (or below the min offset) one of whose keys
   (``topic#key``, ``topic#uniqKey``) hashes to the entry's hash.

Errors are damage (``ok`` is False, the CLI exits 1); warnings are states a store legitimately
has after a crash and before the next open.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np

from .consume_queue_ext import read_ext_tags

from ..config import StoreConfig
from ..format import batch as fbatch
from ..format.hashing import index_key_hash_many
from ..format.index_layout import (ENTRY_DTYPE, INDEX_HEADER, INDEX_HEADER_SIZE, entry_position,
                                   index_file_size, parse_index_file_name)
from ..format.layouts import CQ_UNIT_SIZE, name_to_offset
from ..format.message import TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from .consume_queue import FILLER_SIZE, UNIT_DTYPE
from .damage import root_cause
from .index_file import index_keys
from .lock import check_unlocked

ERROR = "error"
WARNING = "warning"
SIZES_FILE = os.path.join("config", "store.properties")
PER_FILE = 10


@dataclass
class Problem:
    severity: str
    file: str
    offset: int
    what: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.file} @ {self.offset}: {self.what}"


@dataclass
class VerifyReport:
    root: str
    records: int = 0
    segments: int = 0
    queues: int = 0
    cq_units: int = 0
    index_files: int = 0
    index_entries: int = 0
    timer_units: int = 0
    min_offset: int = 0
    max_offset: int = 0
    problems: list[Problem] = field(default_factory=list)
    error_count: int = 0
    warning_count: int = 0
    # the root cause: the first damaged CommitLog record (file, offset, field, expected, found)
    first_damage: dict | None = None
    # ConsumeQueue units and index entries pointing into CommitLog bytes a damaged record made
    # unreadable: consequences of the damage, counted, not listed
    knock_on: int = 0
    _per_file: dict = field(default_factory=dict, repr=False)
    _unreadable: list = field(default_factory=list, repr=False)

    def knock_on_of(self, phy: int) -> bool:
        """Whether CommitLog offset ``phy`` lies in bytes a damaged record made unreadable
        (then the finding is counted as knock-on instead of listed)."""
        for lo, hi in self._unreadable:
            if lo <= phy < hi:
                self.knock_on += 1
                return True
        return False

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add(self, severity: str, path: str, offset: int, what: str) -> None:
        """Record a finding; at most ``PER_FILE`` are listed per file (all are counted)."""
        if severity == ERROR:
            self.error_count += 1
        else:
            self.warning_count += 1
        rel = os.path.relpath(path, self.root)
        n = self._per_file.get(rel, 0) + 1
        self._per_file[rel] = n
        if n <= PER_FILE:
            self.problems.append(Problem(severity, rel, offset, what))
        elif n == PER_FILE + 1:
            self.problems.append(Problem(severity, rel, offset, "further findings in this file not listed"))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("_per_file", None)
        d.pop("_unreadable", None)
        d["ok"] = self.ok
        return d


def store_sizes(root: str, cfg: StoreConfig | None = None) -> StoreConfig:
    """The store's file sizes: ``cfg`` if given, else ``config/store.properties``, else RocketMQ's
    defaults with the CommitLog segment size taken from the first segment."""
    if cfg is not None:
        return cfg
    path = os.path.join(root, SIZES_FILE)
    if os.path.exists(path):
        return StoreConfig.from_properties(path, store_path_root_dir=root)
    cfg = StoreConfig(store_path_root_dir=root)
    segs = _listing(cfg.commitlog_dir)
    if segs:
        cfg.mapped_file_size_commitlog = os.path.getsize(os.path.join(cfg.commitlog_dir, segs[0][1]))
    return cfg


def verify_store(root: str, cfg: StoreConfig | None = None, *, check_lock: bool = True) -> VerifyReport:
    root = os.fspath(root)
    if check_lock:
        _check_unlocked(root)
    cfg = store_sizes(root, cfg)
    report = VerifyReport(root=root)
    records = _verify_commitlog(cfg, report)
    _verify_consume_queues(cfg, report, records)
    _verify_index(cfg, report, records)
    _verify_timer(cfg, report, records)
    return report


def _verify_timer(cfg: StoreConfig, report: VerifyReport, records: _Records) -> None:
    """4. RocketMQ 5's timer files (``store/timer/offline.py``)."""
    from .timer.offline import detect_precision, verify_timer
    root = cfg.store_path_root_dir
    order = np.argsort(records.phy, kind="stable")
    precision = detect_precision(root, cfg.timer_precision_ms)
    report.timer_units = verify_timer(root, precision, records.phy[order], records.topic_arr[order],
                                      records.min_offset, report.add)


def _check_unlocked(root: str) -> None:
    check_unlocked(root, "the store is open; verify checks a closed store")


def _listing(directory: str) -> list[tuple[int, str]]:
    if not os.path.isdir(directory):
        return []
    return sorted((off, n) for n in os.listdir(directory) if (off := name_to_offset(n)) is not None)


class _Records:
    """Columns of every CommitLog record, for the ConsumeQueue and index passes."""

    def __init__(self) -> None:
        self.phy: list[np.ndarray] = []
        self.size: list[np.ndarray] = []
        self.qid: list[np.ndarray] = []
        self.qoff: list[np.ndarray] = []
        self.tags: list[np.ndarray] = []
        self.tran: list[np.ndarray] = []
        self.topics: list[str] = []
        self._pairs: list[np.ndarray] = []
        self.min_offset = 0
        self.max_offset = 0

    def add(self, recs) -> None:
        self.phy.append(recs.offsets.copy())
        self.size.append(recs.size.astype(np.int64))
        self.qid.append(recs.queue_id.astype(np.int64))
        self.qoff.append(recs.queue_offset.copy())
        self.tags.append(recs.tags_code.copy())
        self.tran.append((recs.sys_flag & TRANSACTION_MASK).astype(np.int64))
        self.topics.extend(recs.topic)
        keys, owner = index_keys(recs)
        if keys:
            hashes = index_key_hash_many(keys).astype(np.float64)
            offs = recs.offsets[owner].astype(np.float64)
            self._pairs.append(offs + 1j * hashes)  # exact: offsets < 2**53, hashes < 2**31

    def finish(self) -> None:
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))
        self.phy, self.size, self.qid = cat(self.phy), cat(self.size), cat(self.qid)
        self.qoff, self.tags, self.tran = cat(self.qoff), cat(self.tags), cat(self.tran)
        self.topic_arr = np.asarray(self.topics, dtype=object)
        self.key_pairs = np.sort(np.concatenate(self._pairs)) if self._pairs else np.zeros(0, dtype=np.complex128)

    def queue(self, topic: str, qid: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted queue offsets, record indices) of the dispatchable records of one queue."""
        mask = (self.qid == qid) & (self.topic_arr == topic) & \
            (self.tran != TRANSACTION_PREPARED_TYPE) & (self.tran != TRANSACTION_ROLLBACK_TYPE)
        idx = np.flatnonzero(mask)
        order = np.argsort(self.qoff[idx], kind="stable")
        return self.qoff[idx][order], idx[order]


def _verify_commitlog(cfg: StoreConfig, report: VerifyReport) -> _Records:
    out = _Records()
    size = cfg.mapped_file_size_commitlog
    segs = _listing(cfg.commitlog_dir)
    report.segments = len(segs)
    next_qo: dict[tuple[str, int], int] = {}
    prev = None
    for i, (off, name) in enumerate(segs):
        path = os.path.join(cfg.commitlog_dir, name)
        last = i == len(segs) - 1
        if prev is not None and off != prev + size:
            report.add(ERROR, path, off, f"segment does not follow the one at {prev}")
        prev = off
        actual = os.path.getsize(path)
        if actual != size:
            report.add(ERROR, path, 0, f"size {actual}, expected {size}")
            continue
        with open(path, "rb") as fh:
            buf = fh.read()
        recs = fbatch.decode_records(buf, 0, size, base_offset=off, check_crc=True)
        if len(recs):
            out.add(recs)
            report.records += len(recs)
            _check_record_fields(recs, path, report, next_qo)
        end = recs.end
        if recs.stop == fbatch.STOP_BLANK:
            blank_size = int.from_bytes(buf[end:end + 4], "big", signed=True)
            if blank_size != size - end:
                report.add(ERROR, path, off + end, f"blank record of {blank_size} bytes, {size - end} left")
            if last:
                report.max_offset = off + size
            continue
        if recs.stop in (fbatch.STOP_CORRUPT, fbatch.STOP_INCOMPLETE):
            cause = root_cause(buf, end, off)
            report._unreadable.append((off + end, off + size))
            if report.first_damage is None:
                report.first_damage = {"file": os.path.relpath(path, report.root), **cause}
            report.add(ERROR, path, off + end,
                       f"damaged record: {cause['field']} expected {cause['expected']}, found "
                       f"{cause['found']}" + (f"; next intact record at {cause['next_intact']}"
                                              if cause["next_intact"] is not None else
                                              "; no intact record after it in this segment"))
        elif not last:
            later = segs[i + 1:]
            if all(_starts_empty(os.path.join(cfg.commitlog_dir, n)) for _, n in later):
                report.add(WARNING, path, off + end, f"data ends here; {len(later)} later segment(s) "
                                                     "preallocated but empty (dropped when the store opens)")
                report.max_offset = off + end
                break
            report.add(ERROR, path, off + end, "data ends before the segment's end without a blank "
                                               "record, and later segments hold data")
        else:
            tail = np.frombuffer(buf, dtype=np.uint8, offset=end)
            nz = int(np.count_nonzero(tail))
            if nz:
                first = end + int(np.argmax(tail != 0))
                report.add(WARNING, path, off + first, f"{nz} non-zero bytes after the end of data "
                                                       "(crash residue; zeroed when the store opens)")
        report.max_offset = off + end
    out.min_offset = report.min_offset = segs[0][0] if segs else 0
    out.max_offset = report.max_offset
    out.finish()
    return out


def _starts_empty(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == bytes(8)


def _check_record_fields(recs, path: str, report: VerifyReport, next_qo: dict) -> None:
    phys = recs.commitlog_offset.tolist()
    expect = (recs.base_offset + recs.pos).tolist()
    for p, e in zip(phys, expect):
        if p != e:
            report.add(WARNING, path, e, f"record says PHYSICALOFFSET {p} (RocketMQ accepts it)")
    tran = (recs.sys_flag & TRANSACTION_MASK).tolist()
    for t, topic, q, qo, e in zip(tran, recs.topic, recs.queue_id.tolist(), recs.queue_offset.tolist(), expect):
        if t in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            continue
        key = (topic, q)
        want = next_qo.get(key)
        if want is not None and qo != want:  # legal: offsets restart when a topic is re-created
            report.add(WARNING, path, e, f"{topic}/{q}: queue offset {qo} after {want - 1}")
        next_qo[key] = qo + 1


def _verify_consume_queues(cfg: StoreConfig, report: VerifyReport, records: _Records) -> None:
    root = cfg.consume_queue_dir
    if not os.path.isdir(root):
        return
    fsize = cfg.cq_file_size
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for qid_s in sorted(os.listdir(tdir)):
            qdir = os.path.join(tdir, qid_s)
            if not qid_s.isdigit() or not os.path.isdir(qdir):
                continue
            report.queues += 1
            _verify_queue(topic, int(qid_s), qdir, fsize, report, records)


def _verify_queue(topic: str, qid: int, qdir: str, fsize: int, report: VerifyReport,
                  records: _Records) -> None:
    files = _listing(qdir)
    if not files:
        return
    parts = []
    prev = None
    for off, name in files:
        path = os.path.join(qdir, name)
        if prev is not None and off != prev + fsize:
            report.add(ERROR, path, off, f"ConsumeQueue file does not follow the one at {prev}")
            return
        prev = off
        actual = os.path.getsize(path)
        if actual != fsize:
            report.add(ERROR, path, 0, f"size {actual}, expected {fsize}")
            return
        with open(path, "rb") as fh:
            parts.append(np.frombuffer(fh.read(), dtype=UNIT_DTYPE))
    units = np.concatenate(parts)
    base = files[0][0] // CQ_UNIT_SIZE
    valid = (units["offset"] >= 0) & (units["size"] > 0)
    n = len(units) if valid.all() else int(np.argmin(valid))
    last_path = os.path.join(qdir, files[-1][1])
    if n < len(units) and np.count_nonzero(units[n:].view(np.uint8)):
        report.add(WARNING, last_path, (base + n) * CQ_UNIT_SIZE,
                   "non-zero bytes after the last unit (crash residue)")
    units = units[:n]
    real = units["size"] != FILLER_SIZE
    first_real = int(np.argmax(real)) if real.any() else n
    qoffs, idx = records.queue(topic, qid)
    _check_units(units, first_real, base, topic, qid, records, qdir, files, fsize, report)
    report.cq_units += n - first_real
    covered = base + n
    last_phy = int(units["offset"][n - 1]) if n > first_real else -1
    behind = int(np.count_nonzero((qoffs >= covered) & (records.phy[idx] > last_phy))) if len(qoffs) else 0
    if behind:
        report.add(WARNING, last_path, covered * CQ_UNIT_SIZE,
                   f"{topic}/{qid}: {behind} record(s) not yet in the ConsumeQueue (rebuilt on open)")


def _check_units(units, first_real, base, topic, qid, records, qdir, files, fsize, report) -> None:
    """Every unit from ``first_real`` against the record with its queue offset (vectorised;
    only the findings are walked in Python)."""
    u = units[first_real:]
    if not len(u):
        return
    qo = base + first_real + np.arange(len(u), dtype=np.int64)
    phy, size, tags = u["offset"].astype(np.int64), u["size"].astype(np.int64), u["tags_code"].astype(np.int64)
    tags, ext_missing = read_ext_tags(qdir, tags)  # ConsumeQueue-ext addresses -> their tagsCode
    for k in np.flatnonzero(ext_missing).tolist():
        report.add(ERROR, _cq_path(qdir, files, first_real + k, fsize), int(qo[k]) * CQ_UNIT_SIZE,
                   f"unit {int(qo[k])}: ConsumeQueue-ext unit at {int(tags[k])} missing")
    filler = size == FILLER_SIZE
    cleaned = phy < records.min_offset
    # match units to records by CommitLog offset: a queue's offsets may restart at 0 (topic
    # deleted and re-created), so a queue offset alone does not name one record
    n_rec = len(records.phy)
    j = np.minimum(np.searchsorted(records.phy, phy), max(n_rec - 1, 0))
    found = (records.phy[j] == phy) if n_rec else np.zeros(len(u), dtype=bool)
    r = j
    if n_rec:
        same = found & (records.qid[r] == qid) & (records.topic_arr[r] == topic) \
            & (records.qoff[r] == qo) & (records.size[r] == size) & (records.tags[r] == tags)
    else:
        same = found
    for k in np.flatnonzero(filler).tolist():  # a queue offset no record has (see put_units)
        report.add(WARNING, _cq_path(qdir, files, first_real + k, fsize), int(qo[k]) * CQ_UNIT_SIZE,
                   f"unit {int(qo[k])}: filler (no record has this queue offset)")
    bad = np.flatnonzero(~filler & ~cleaned & ~same)
    for k in bad.tolist():
        i = first_real + k
        q, p, sz, tg = int(qo[k]), int(phy[k]), int(size[k]), int(tags[k])
        where = _cq_path(qdir, files, i, fsize)
        if filler[k]:
            report.add(ERROR, where, q * CQ_UNIT_SIZE, "filler unit after real units")
        elif not found[k]:
            if report.knock_on_of(p):
                continue
            report.add(ERROR, where, q * CQ_UNIT_SIZE, f"unit {q} -> CommitLog {p}: not the start of a record")
        else:
            rr = int(r[k])
            report.add(ERROR, where, q * CQ_UNIT_SIZE,
                       f"unit {q} = ({p}, {sz}, {tg}) of {topic}/{qid} but the record is "
                       f"{records.topic_arr[rr]}/{int(records.qid[rr])} #{int(records.qoff[rr])} "
                       f"({int(records.phy[rr])}, {int(records.size[rr])}, {int(records.tags[rr])})")


def _cq_path(qdir: str, files, unit_index: int, fsize: int) -> str:
    k = min(len(files) - 1, unit_index * CQ_UNIT_SIZE // fsize)
    return os.path.join(qdir, files[k][1])


def _verify_index(cfg: StoreConfig, report: VerifyReport, records: _Records) -> None:
    d = cfg.index_dir
    if not os.path.isdir(d):
        return
    slots, num = cfg.max_hash_slot_num, cfg.max_index_num
    want = index_file_size(slots, num)
    for name in sorted(os.listdir(d)):
        if parse_index_file_name(name) is None:
            continue
        path = os.path.join(d, name)
        report.index_files += 1
        actual = os.path.getsize(path)
        if actual != want:
            report.add(ERROR, path, 0, f"size {actual}, expected {want} for {slots} slots, {num} entries")
            continue
        with open(path, "rb") as fh:
            buf = fh.read()
        (bt, et, bp, ep, _hsc, count) = INDEX_HEADER.unpack_from(buf, 0)
        count = max(count, 1)
        if count > num:
            report.add(ERROR, path, 36, f"indexCount {count} exceeds {num}")
            continue
        if count == 1 and (bp != ep or bt != et):
            # a file without entries has begin == end (both carried from the previous file)
            report.add(ERROR, path, 36, f"indexCount {count} (no entries) but the header covers "
                                        f"CommitLog {bp}..{ep}: its entries are lost")
        # past the last entry (and the one a killed put may have left) the file is zeros
        beyond = entry_position(slots, count + 1)
        if beyond < len(buf):
            nz = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8, offset=beyond))
            if len(nz):
                report.add(ERROR, path, beyond + int(nz[0]),
                           f"non-zero bytes beyond indexCount {count}: entries lost")
        slot_vals = np.frombuffer(buf, dtype=">i4", count=slots, offset=INDEX_HEADER_SIZE).astype(np.int64)
        entries = np.frombuffer(buf, dtype=ENTRY_DTYPE, count=count, offset=entry_position(slots, 0))[1:]
        heads = np.zeros(slots, dtype=np.int64)  # a slot holds its newest entry (or 0)
        np.maximum.at(heads, entries["key_hash"].astype(np.int64) % slots, np.arange(1, count, dtype=np.int64))
        for s in np.flatnonzero(slot_vals != heads).tolist():
            report.add(ERROR, path, INDEX_HEADER_SIZE + 4 * s,
                       f"slot {s} = {int(slot_vals[s])}, its newest entry is {int(heads[s])}")
        report.index_entries += count - 1
        _check_entries(entries, slots, path, records, report)


def _member(sorted_values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``np.isin(x, sorted_values)`` for an already sorted array (binary search, no re-sort)."""
    if not len(sorted_values):
        return np.zeros(len(x), dtype=bool)
    j = np.minimum(np.searchsorted(sorted_values, x), len(sorted_values) - 1)
    return sorted_values[j] == x


def _check_entries(entries, slots: int, path: str, records: _Records, report: VerifyReport) -> None:
    """Links, offsets and key hashes of entries 1..count-1 (vectorised)."""
    k = np.arange(1, len(entries) + 1, dtype=np.int64)
    phy = entries["phy_offset"].astype(np.int64)
    h = entries["key_hash"].astype(np.int64)
    prev = entries["prev_index"].astype(np.int64)
    td = entries["time_diff"].astype(np.int64)
    # the chain rule: prevIndex is the previous entry of the same slot, or 0
    slot = h % slots
    order = np.lexsort((k, slot))
    expect = np.zeros(len(k), dtype=np.int64)
    same_slot = np.zeros(len(k), dtype=bool)
    same_slot[1:] = slot[order][1:] == slot[order][:-1]
    expect[order[1:][same_slot[1:]]] = k[order][:-1][same_slot[1:]]
    link_bad = (prev != expect) | (td < 0)
    live = phy >= records.min_offset
    starts = _member(records.phy, phy)  # record offsets are ascending
    key_ok = _member(records.key_pairs, phy.astype(np.float64) + 1j * h.astype(np.float64))
    for i in np.flatnonzero(link_bad | (live & ~(starts & key_ok))).tolist():
        pos = entry_position(slots, int(k[i]))
        if link_bad[i]:
            report.add(ERROR, path, pos, f"entry {int(k[i])}: prevIndex {int(prev[i])} (expected "
                                         f"{int(expect[i])}), timeDiff {int(td[i])}")
        elif not starts[i]:
            if report.knock_on_of(int(phy[i])):
                continue
            report.add(ERROR, path, pos, f"entry {int(k[i])} -> CommitLog {int(phy[i])}: not the start of a record")
        else:
            report.add(ERROR, path, pos, f"entry {int(k[i])} -> CommitLog {int(phy[i])}: no key of that "
                                         f"record hashes to {int(h[i])}")
