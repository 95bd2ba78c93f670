"""The plain ACL at work: the permission manager, its file watcher, the request guard and the
admin codes mqadmin uses (UPDATE_AND_CREATE_ACL_CONFIG 50, DELETE_ACL_CONFIG 51,
GET_BROKER_CLUSTER_ACL_INFO 52, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG 53,
GET_BROKER_CLUSTER_ACL_CONFIG 54).

Theory of operation: ``PlainPermissionManager`` holds one ``AclSnapshot`` (``broker.acl``) and
swaps it whole on every (re)load; checks read whichever snapshot is current, on the event loop,
without a lock. Writes (the admin codes) run on the store executor under a lock: read the YAML
file that holds the account, change it as RocketMQ does (an updated account moves to the end of
``accounts``, ``dataVersion`` is bumped), write it atomically (temp file, fsync, rename), reload.
``AclFileWatchService`` polls the files every ``acl_watch_interval_ms`` (RocketMQ: 5 s) and
reloads when a file's mtime or the number of files changed; a file that no longer parses is
reported and the last good configuration stays in force.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ...store.checkpoint import atomic_write
from .plain import (AclError, AclSnapshot, DataVersion, acl_files, build_account,
                    check_resource_perms, cluster_acl_config, file_stamp, load_snapshot,
                    parse_request, validate, versions_json)
from .address import parse_address_rule

if TYPE_CHECKING:
    from ..contexts import AclContext

log = logging.getLogger(__name__)
Handler = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]


def read_yaml(path: str) -> dict | None:
    """A YAML mapping, None when the file is missing or empty; ``AclError`` when unreadable."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as exc:
        raise AclError(f"{path}: {exc}") from exc
    if data is None:
        return None
    if not isinstance(data, dict):
        raise AclError(f"{path}: not a YAML mapping")
    return data


def write_yaml(path: str, data: dict) -> None:
    """Write ``data`` in SnakeYAML's ``dumpAsMap`` block style, atomically (the file keeps its
    permission bits, a new one is 0600: it holds secret keys; a symlinked file, a mounted
    config, is written through)."""
    import yaml

    text = yaml.safe_dump(data, default_flow_style=False, sort_keys=False, allow_unicode=True)
    path = os.path.realpath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_write(path, text.encode("utf-8"), point=None, keep_mode=True, new_file_mode=0o600,
                 record_synced=False)


def _split(value: str | None) -> list[str] | None:
    """``UtilAll.split(s, ",")``: Java's ``String.split`` (trailing empty parts dropped)."""
    if value is None:
        return None
    parts = value.split(",")
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


class PlainPermissionManager:
    def __init__(self, default_file: str) -> None:
        self.default_file = os.path.normpath(os.path.abspath(default_file))
        self._lock = threading.Lock()
        self.snapshot = AclSnapshot()
        self.watcher: AclFileWatchService | None = None  # started by ``start_acl``

    def load(self) -> None:
        """(Re)read every file; the default file is created empty when missing, as RocketMQ
        does. Raises ``AclError`` (the old snapshot stays) when a file is bad."""
        if not os.path.exists(self.default_file):
            os.makedirs(os.path.dirname(self.default_file), exist_ok=True)
            open(self.default_file, "a").close()
        self.snapshot = load_snapshot(self.default_file, read_yaml)

    def changed(self) -> bool:
        """Whether the files differ from what the snapshot was read from (the watcher's test)."""
        files = acl_files(self.default_file)
        snap = self.snapshot
        if tuple(files) != snap.files:
            return True
        return any(file_stamp(path) != snap.stamps.get(path) for path in files)

    def check(self, cmd: RemotingCommand, peer: str | None) -> None:
        validate(self.snapshot, parse_request(cmd, peer))

    # -- writes (PlainPermissionManager.updateAccessConfig & co) ---------------------------------
    def _write(self, path: str, data: dict) -> None:
        old = self.snapshot.versions.get(path)
        data["dataVersion"] = [(_file_version(data) or old or DataVersion(0, 0)).next().to_json()]
        write_yaml(path, data)
        self.load()

    def update_account(self, cfg: dict) -> None:
        ak, sk = cfg.get("accessKey"), cfg.get("secretKey")
        if ak is None or sk is None or len(ak) <= 6 or len(sk) <= 6:
            raise AclError(f"The accessKey={ak} and secretKey={sk} cannot be null and length "
                           "should longer than 6")
        check_resource_perms(cfg.get("topicPerms"))
        check_resource_perms(cfg.get("groupPerms"))
        build_account(cfg)  # a bad whiteRemoteAddress or permission fails before any write
        with self._lock:
            path = self.snapshot.key_file.get(ak, self.default_file)
            data = read_yaml(path) or {}
            accounts = list(data.get("accounts") or [])
            old = next((a for a in accounts if str(a.get("accessKey")) == ak), None)
            if old is not None:
                accounts.remove(old)
            accounts.append(_merge_account(old, cfg))
            data["accounts"] = accounts
            self._write(path, data)

    def delete_account(self, access_key: str | None) -> bool:
        if not access_key:
            return False
        with self._lock:
            path = self.snapshot.key_file.get(access_key)
            if path is None:
                return False
            data = read_yaml(path)
            if not data:
                return True
            accounts = list(data.get("accounts") or [])
            kept = [a for a in accounts if str(a.get("accessKey")) != access_key]
            if len(kept) == len(accounts):
                return False
            data["accounts"] = kept
            self._write(path, data)
            return True

    def update_global_white(self, rules: list[str], path: str | None) -> bool:
        for rule in rules:
            parse_address_rule(rule)  # AclError on a malformed rule, before writing
        with self._lock:
            path = os.path.normpath(path) if path else self.default_file
            if path not in self.snapshot.files and path != self.default_file:
                log.warning("%s is not one of this broker's ACL files", path)
                return False
            if not os.path.isfile(path):
                return False
            data = read_yaml(path) or {}
            data["globalWhiteRemoteAddresses"] = list(rules)
            self._write(path, data)
            return True


def _file_version(data: dict) -> DataVersion | None:
    dv = data.get("dataVersion")
    if isinstance(dv, list) and dv and isinstance(dv[0], dict):
        try:
            return DataVersion(int(dv[0].get("counter", 0)), int(dv[0].get("timestamp", 0)))
        except (TypeError, ValueError):
            return None
    return None


def _merge_account(old: dict | None, cfg: dict) -> dict:
    """``createAclAccessConfigMap``: the request's values over the account's existing entry."""
    out = dict(old or {})
    out["accessKey"] = cfg["accessKey"]
    if cfg.get("secretKey"):
        out["secretKey"] = cfg["secretKey"]
    if cfg.get("whiteRemoteAddress") is not None:
        out["whiteRemoteAddress"] = cfg["whiteRemoteAddress"]
    out["admin"] = bool(cfg.get("admin"))
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if cfg.get(key):
            out[key] = cfg[key]
    for key in ("topicPerms", "groupPerms"):
        if cfg.get(key) is not None:
            out[key] = cfg[key]
    return out


class AclFileWatchService:
    """Reloads the ACL files when they change (RocketMQ's ``AclFileWatchService``)."""

    def __init__(self, manager: PlainPermissionManager, interval_s: float) -> None:
        self.manager = manager
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reloads = 0
        self._bad: tuple | None = None  # the files as they were when a reload failed

    def run_once(self) -> bool:
        if not self.manager.changed():
            return False
        files = acl_files(self.manager.default_file)
        seen = tuple((p, file_stamp(p)) for p in files)
        if seen == self._bad:  # reported already; wait for the next edit
            return False
        try:
            with self.manager._lock:
                self.manager.load()
        except AclError as exc:
            self._bad = seen
            log.error("ACL files not reloaded, the last good configuration stays: %s", exc)
            return False
        self._bad = None
        self.reloads += 1
        log.info("ACL files reloaded: %s", ", ".join(self.manager.snapshot.files))
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:  # keep watching whatever one pass hit
                log.exception("ACL file watch failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="acl-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


# -- wiring -----------------------------------------------------------------------------------
def start_acl(cfg: Any, store_config: Any) -> PlainPermissionManager:
    """Load the files and start the watcher (raises ``AclError`` for a bad file); ``cfg`` is
    the ``BrokerConfig``."""
    path = cfg.acl_plain_file or os.path.join(store_config.store_path_root_dir,
                                              "conf", "plain_acl.yml")
    manager = PlainPermissionManager(path)
    manager.load()
    watcher = AclFileWatchService(manager, cfg.acl_watch_interval_ms / 1000.0)
    watcher.start()
    manager.watcher = watcher
    return manager


def guard(manager: PlainPermissionManager, handlers: dict[int, Handler]) -> dict[int, Handler]:
    """Every handler behind the ACL check (RocketMQ's server RPC hook)."""
    def wrap(handler: Handler) -> Handler:
        async def checked(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
            try:
                manager.check(cmd, conn.peer)
            except AclError as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark=exc.remark)
            return await handler(conn, cmd)
        return checked
    return {code: wrap(h) for code, h in handlers.items()}


_OFF = "ACL is not enabled on this broker (set aclEnable=true)"


async def update_acl(ctx: AclContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    m, f = ctx.acl, cmd.ext_fields
    fail = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    if m is None:
        return cmd.response(fail, remark=_OFF)
    cfg = {"accessKey": f.get("accessKey"), "secretKey": f.get("secretKey"),
           "whiteRemoteAddress": f.get("whiteRemoteAddress"),
           "admin": cmd.get_bool("admin"), "defaultTopicPerm": f.get("defaultTopicPerm"),
           "defaultGroupPerm": f.get("defaultGroupPerm"),
           "topicPerms": _split(f.get("topicPerms")),
           "groupPerms": _split(f.get("groupPerms"))}
    try:
        await ctx.run(m.update_account, cfg)
    except (AclError, OSError) as exc:
        return cmd.response(fail, remark=getattr(exc, "message", None) or str(exc))
    return cmd.response(ResponseCode.SUCCESS)


async def delete_acl(ctx: AclContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    m, ak = ctx.acl, cmd.ext_fields.get("accessKey")
    fail = ResponseCode.DELETE_ACL_CONFIG_FAILED
    if m is None:
        return cmd.response(fail, remark=_OFF)
    try:
        ok = await ctx.run(m.delete_account, ak)
    except (AclError, OSError) as exc:
        return cmd.response(fail, remark=getattr(exc, "message", None) or str(exc))
    if not ok:
        return cmd.response(fail, remark=f"The accesskey[{ak}] corresponding to accessConfig "
                                         "has been deleted failed.")
    return cmd.response(ResponseCode.SUCCESS)


async def update_global_white(ctx: AclContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    m, f = ctx.acl, cmd.ext_fields
    fail = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
    if m is None:
        return cmd.response(fail, remark=_OFF)
    addrs = f.get("globalWhiteAddrs")
    try:
        ok = await ctx.run(m.update_global_white, _split(addrs) or [],
                              f.get("aclFileFullPath"))
    except (AclError, OSError) as exc:
        return cmd.response(fail, remark=getattr(exc, "message", None) or str(exc))
    if not ok:
        return cmd.response(fail, remark=f"The globalWhiteAddresses[{addrs}] has been "
                                         "updated failed.")
    return cmd.response(ResponseCode.SUCCESS)


async def acl_version(ctx: AclContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    m = ctx.acl
    if m is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=_OFF)
    v, every = versions_json(m.snapshot, m.default_file)
    c = ctx.config
    return cmd.response(ResponseCode.SUCCESS, {
        "version": v, "allAclFileVersion": every, "brokerName": c.broker_name,
        "brokerAddr": ctx.store_host, "clusterName": c.cluster_name})


async def acl_config(ctx: AclContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    import json

    m = ctx.acl
    if m is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=_OFF)
    try:
        body = await ctx.run(cluster_acl_config, m.snapshot, read_yaml,
                             cmd.ext_fields.get("AccessKey"))  # others masked
    except AclError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=exc.message)
    return cmd.response(ResponseCode.SUCCESS, body=json.dumps(
        body, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


__all__ = ["PlainPermissionManager", "AclFileWatchService", "start_acl", "guard", "read_yaml",
           "write_yaml"]
