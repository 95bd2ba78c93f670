"""CleanService: delete expired CommitLog segments, then let ConsumeQueues and index follow.

Theory of operation (RocketMQ's ``CleanCommitLogService`` + ``CleanConsumeQueueService``).

A round (``run_once``; the thread runs one every ``clean_resource_interval`` ms) does:

1. **Disk check** (``check_disk``). ``disk_usage(path)`` (used / total of the partition, an
   injectable function) is read for the CommitLog and the ConsumeQueue directories.
   Above ``disk_space_warning_level_ratio`` (90 %) the store is marked not writeable
   (``put_path.writeable = False`` → puts get ``SERVICE_NOT_AVAILABLE``) and files are cleaned
   immediately; above ``disk_space_clean_forcibly_ratio`` (85 %) files are cleaned immediately;
   at or below it the store is writeable again. Above ``disk_max_used_space_ratio`` (75 %) — or
   when the usage cannot be read — there is "space to delete".
2. **CommitLog.** Deletion runs when it is time (the current local hour is one of
   ``delete_when``, ``"04"`` or ``"04;16"``), when there is space to delete, or on a manual
   request (``run_once(manual=True)``, ``request_manual_delete``: RocketMQ's
   ``executeDeleteFilesManually``, which skips the hour check but still deletes only expired
   files). Segments are taken oldest first, never the last one, never one that dispatch or the
   flush has not passed; a segment goes when ``now >= mtime + file_reserved_time`` hours, or
   regardless of age when cleaning immediately (``clean_file_forcibly_enable``). The walk stops
   at the first segment that must stay (no holes) and after ``delete_file_batch_max`` segments.
   With a tier (``store.tier``) no segment goes before every tiered record in it is in the tier
   (``TierService.uploaded_below``), and past ``disk_max_used_space_ratio`` the segments already
   in the tier go at once, whatever their age: sends go on and the tier serves those reads.
3. **ConsumeQueues and index** follow when the CommitLog's min offset moved:
   ``ConsumeQueue.delete_expired_files(min)`` drops non-last files whose last unit points below
   it and corrects the queue's min offset (``correctMinOffset``);
   ``IndexService.delete_expired_file(min)`` drops index files wholly below it.

Readers racing a deletion never crash: a deleted segment's mapping stays valid until its last
reader lets go (``MappedFile.destroy``), a unit whose record is gone gives
``MESSAGE_WAS_REMOVING``, and an offset under the corrected minimum ``OFFSET_TOO_SMALL``.
A clock (``time.time``-like, seconds) and the usage function are injectable for tests.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from . import syncprobe

log = logging.getLogger(__name__)

MANUAL_DELETE_ROUNDS = 20  # DefaultMessageStore.executeDeleteFilesManually


def partition_usage(path: str) -> float:
    """Used fraction of the partition holding ``path`` (RocketMQ: (total - free) / total);
    -1.0 when it cannot be read."""
    p = path
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p or "/")
    except OSError:
        return -1.0
    if st.f_blocks <= 0:
        return -1.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


def is_time_to_delete(delete_when: str, now_s: float) -> bool:
    """``UtilAll.isItTimeToDo``: the local hour is one of ``"04;16"``."""
    hour = time.localtime(now_s).tm_hour
    for item in delete_when.split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


def expired_prefix(files: list, now_ms: int, expired_ms: int, clean_at_once: bool,
                   batch_max: int, limit_offset: int) -> int:
    """How many leading segments to delete (``deleteExpiredFileByTime``; never the last)."""
    n = 0
    for mf in files[:-1]:
        if n >= batch_max:
            break
        if mf.file_from_offset + mf.file_size > limit_offset:
            break  # not yet dispatched or flushed: its units and keys would be lost
        try:
            mtime_ms = os.stat(mf.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            mtime_ms = 0
        if now_ms >= mtime_ms + expired_ms or clean_at_once:
            n += 1
        else:
            break
    return n


class CleanService:
    def __init__(self, store, clock: Callable[[], float] = time.time,
                 disk_usage: Callable[[str], float] = partition_usage) -> None:
        self.store = store
        self.cfg = store.cfg
        self.clock = clock
        self.disk_usage = disk_usage
        self.manual_rounds = 0
        self.clean_immediately = False
        self.disk_full = False
        self.last_min_phy = 0  # CleanConsumeQueueService.lastPhysicalMinOffset
        self.deleted_segments = 0
        self.last_error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="CleanService", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        interval = max(0.01, self.cfg.clean_resource_interval / 1000.0)
        while not self._stop.wait(interval):
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - kept in last_error, logged, retried
                self.last_error = exc
                log.exception("clean round failed; will retry")

    def request_manual_delete(self, rounds: int = MANUAL_DELETE_ROUNDS) -> None:
        self.manual_rounds = rounds

    # -- one round ------------------------------------------------------------------------------
    def run_once(self, manual: bool = False) -> int:
        """One round; returns how many CommitLog segments were deleted."""
        with self._lock:
            deleted = self.delete_commitlog_files(manual)
            if deleted:
                syncprobe.crash_point("clean-delete")
            self.delete_logic_files()
            return deleted

    def check_disk(self) -> bool:
        """Update the writeable flag and ``clean_immediately``; True if there is space to delete."""
        cfg = self.cfg
        self.clean_immediately = False
        space = False
        paths = [cfg.commitlog_dir, cfg.consume_queue_dir]
        for i, path in enumerate(paths):
            ratio = self.disk_usage(path)
            if i == 0:
                if ratio > cfg.warning_ratio:
                    if not self.disk_full:
                        log.error("disk usage %.1f%% over %.0f%%: the store is not writeable",
                                  ratio * 100, cfg.warning_ratio * 100)
                    self._set_disk_full(True)
                    self.clean_immediately = True
                elif ratio > cfg.clean_forcibly_ratio:
                    self.clean_immediately = True
                else:
                    if self.disk_full:
                        log.info("disk usage %.1f%%: the store is writeable again", ratio * 100)
                    self._set_disk_full(False)
            elif ratio > cfg.warning_ratio:
                self.clean_immediately = True
            if ratio < 0 or ratio > cfg.max_used_ratio:
                space = True
        return space

    def _set_disk_full(self, full: bool) -> None:
        self.disk_full = full
        put_path = getattr(self.store, "put_path", None)
        if put_path is not None:
            put_path.writeable = not full

    def delete_commitlog_files(self, manual: bool = False) -> int:
        cfg = self.cfg
        now_s = self.clock()
        time_up = is_time_to_delete(cfg.delete_when, now_s)
        space = self.check_disk()
        manual_pending = manual or self.manual_rounds > 0
        if not (time_up or space or manual_pending):
            return 0
        if self.manual_rounds > 0 and not manual:
            self.manual_rounds -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        commitlog = self.store.commitlog
        limit = min(self.store.reput.reput_from, commitlog.flushed_offset()) \
            if cfg.sync_flush else self.store.reput.reput_from
        tier = getattr(self.store, "tier", None)
        if tier is not None:
            # with a tier a segment leaves the local disk only once its records are in the tier;
            # past diskMaxUsedSpaceRatio those go at once, whatever their age (the disk full
            # stops being an outage: the tier still serves them)
            limit = tier.uploaded_below(limit)
            clean_at_once = clean_at_once or space
        files = list(commitlog.queue.files)
        n = expired_prefix(files, int(now_s * 1000), cfg.file_reserved_time * 3600 * 1000,
                           clean_at_once, cfg.delete_file_batch_max, limit)
        if n:
            gone = commitlog.queue.delete_first_files(n)
            self.deleted_segments += len(gone)
            log.info("deleted %d expired CommitLog segment(s): %s .. %s%s", len(gone),
                     gone[0].name, gone[-1].name, " (forced)" if clean_at_once else "")
        return n

    def delete_logic_files(self) -> None:
        """ConsumeQueues and index follow the CommitLog's min offset."""
        min_phy = self.store.commitlog.min_offset()
        if min_phy <= self.last_min_phy:
            return
        for cq in self.store.cq_table:
            cq.delete_expired_files(min_phy)
        ext = getattr(self.store, "cq_ext", None)
        if ext is not None:  # ConsumeQueue-ext files follow their queues
            ext.delete_expired(self.store.cq_table)
        index = getattr(self.store, "index_service", None)
        if index is not None:
            index.delete_expired_file(min_phy)
        self.last_min_phy = min_phy
