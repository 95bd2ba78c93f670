"""RocketMQ 4.9.7's plain ACL (``PlainAccessValidator`` + ``PlainPermissionManager``).

With ``aclEnable=true`` every request to the broker is checked before its handler runs:

1. a client address matching a ``globalWhiteRemoteAddresses`` rule passes;
2. otherwise the request must carry ``AccessKey`` of a configured account ("No accessKey is
   configured", "No acl config for X");
3. an address matching the account's ``whiteRemoteAddress`` passes;
4. the ``Signature`` must be base64(HmacSHA1(secretKey, content)) ("Check signature failed");
5. admin-only codes (create/delete topic, subscription group, broker config) need ``admin: true``;
   each resource the request touches needs its permission: ``topicPerms`` / ``groupPerms`` entries
   first, else ``defaultTopicPerm`` / ``defaultGroupPerm`` ("No default permission for topic:X").
   A group is checked as its retry topic ``%RETRY%group`` (the resource map keys), as RocketMQ does.

A refused request is answered SYSTEM_ERROR with RocketMQ's own remark text
(``org.apache.rocketmq.acl.common.AclException: <reason>, <java frame>``), so clients and scripts
see what a RocketMQ broker says. Which resources a code touches is ``request_resources``.

Files: the default file (``<store>/conf/plain_acl.yml`` or ``aclPlainFile``) plus every
``*.yml`` / ``*.yaml`` under ``acl/`` beside it; an access key lives in one file. The admin
codes rewrite the file that holds the account (bumping its ``dataVersion``), and
``AclFileWatchService`` reloads files whose mtime or number changed, as RocketMQ's watcher does.
State is an immutable snapshot swapped whole, so a check never sees half a reload.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ...format.hashing import java_hash
from ...remoting.codes import RequestCode
from ...remoting.command import RemotingCommand
from ...remoting.jsonbody import load_json_text
from ...remoting.signing import (ACCESS_KEY, SIGNATURE, UNIQUE_MSG_QUERY_FLAG, cal_signature,
                                 request_content)
from .address import AclError, parse_address_rule

log = logging.getLogger(__name__)

DENY, ANY, PUB, SUB = 1, 2, 4, 8  # Permission
RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
ADMIN_CODES = frozenset({RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG,
                         RequestCode.DELETE_TOPIC_IN_BROKER,
                         RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                         RequestCode.DELETE_SUBSCRIPTIONGROUP}) | frozenset({
    # stricter than RocketMQ 4.9.7, whose ``Permission.ADMIN_CODE`` leaves these out: without
    # them any account could rewrite plain_acl.yml (make itself admin) or read every secret key
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG})
# the codes that manage the ACL itself: a white-listed address alone never reaches them, the
# request must name an admin account (signed, or from that account's white address)
ACL_ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG})
MASKED_SECRET = "***"  # what an answer shows instead of another account's secret key
KEY_MIN_LENGTH = 6  # ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: keys must be longer

# the Java frames RocketMQ 4.9.7 names in a refusal's remark
_PPM = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
AT_NO_KEY = f"{_PPM}.validate(PlainPermissionManager.java:663)"
AT_NO_ACCOUNT = f"{_PPM}.validate(PlainPermissionManager.java:667)"
AT_SIGNATURE = f"{_PPM}.validate(PlainPermissionManager.java:683)"
AT_ADMIN = f"{_PPM}.checkPerm(PlainPermissionManager.java:580)"
AT_DEFAULT_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:605)"
AT_RESOURCE_PERM = f"{_PPM}.checkPerm(PlainPermissionManager.java:610)"
AT_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"


# -- permissions ------------------------------------------------------------------------------
def parse_perm(text: object) -> int:
    """``Permission.parsePermFromString``: PUB, SUB, PUB|SUB, SUB|PUB; anything else is DENY."""
    s = str(text).strip() if text is not None else ""
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(s, DENY)


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def check_resource_perms(entries: Iterable[str] | None) -> None:
    """``Permission.checkResourcePerms``: every entry is ``name=PERM`` with a real permission."""
    for entry in entries or ():
        items = [p for p in str(entry).split("=") if p]
        if len(items) != 2:
            raise AclError(f"Parse Resource format error for {entry}.\n"
                           "The expected resource format is 'Res=Perm'. For example: topicA=SUB")
        if items[1].strip() != "DENY" and parse_perm(items[1]) == DENY:
            raise AclError(f"Parse resource permission error for {entry}.\n"
                           "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.")


def _describe(resource: str) -> str:
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


def _java_hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a Java ``HashMap`` holding ``keys`` (inserted in this order): which
    refused resource RocketMQ names first."""
    n = 16
    while len(keys) > n * 3 // 4:
        n *= 2
    def bucket(k: str) -> int:
        h = java_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (n - 1)
    return [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


# -- accounts ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white: Any  # an acl_address rule
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: dict[str, int] | None  # resource (topic, or %RETRY%group) -> permission


def _as_list(v: Any) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [str(v)]


def build_account(cfg: dict) -> Account:
    """An ``Account`` from one ``accounts`` entry; ``AclError`` says what is wrong with it."""
    ak, sk = cfg.get("accessKey"), cfg.get("secretKey")
    ak = None if ak is None else str(ak)
    sk = None if sk is None else str(sk)
    if ak is None or sk is None or len(ak) <= KEY_MIN_LENGTH or len(sk) <= KEY_MIN_LENGTH:
        raise AclError(f"The accessKey={ak} and secretKey={sk} cannot be null and length "
                       "should longer than 6")
    perms: dict[str, int] | None = None
    for is_topic, key in ((False, "groupPerms"), (True, "topicPerms")):
        for entry in _as_list(cfg.get(key)) or ():
            items = [p for p in entry.split("=") if p]
            if len(items) != 2:
                raise AclError(f"Parse resource permission failed for "
                               f"{'topic' if is_topic else 'group'}:{entry}")
            name = items[0].strip()
            perms = perms if perms is not None else {}
            perms[name if is_topic else RETRY_PREFIX + name] = parse_perm(items[1])
    white = cfg.get("whiteRemoteAddress")
    return Account(ak, sk, parse_address_rule(None if white is None else str(white)),
                   _bool(cfg.get("admin")), parse_perm(cfg.get("defaultTopicPerm")),
                   parse_perm(cfg.get("defaultGroupPerm")), perms)


def _bool(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


# -- what a request touches -------------------------------------------------------------------
@dataclass
class AccessRequest:
    """``PlainAccessResource`` of one request: who, from where, what it touches, what it signed."""
    code: int
    ip: str | None
    access_key: str | None = None
    signature: str | None = None
    resources: dict[str, int] = field(default_factory=dict)
    content: bytes = b""


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY_PREFIX + group


def request_resources(cmd: RemotingCommand) -> dict[str, int]:
    """The resources (topic or ``%RETRY%group``) ``cmd`` needs, with the permission, as
    ``PlainAccessValidator.parse``; insertion order as RocketMQ adds them."""
    f = cmd.ext_fields
    out: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            out[resource] = perm
    code = cmd.code
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        topic = f.get("topic" if code == RequestCode.SEND_MESSAGE else "b")
        group = f.get("group" if code == RequestCode.SEND_MESSAGE else "a")
        if topic is not None and topic.startswith(RETRY_PREFIX):
            add(_retry(group), SUB)
        else:
            add(topic, PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(f.get("group")), SUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        add(f.get("topic"), SUB)
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(f.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        try:
            data = load_json_text((cmd.body or b"").decode("utf-8")) or {}
            for consumer in data.get("consumerDataSet") or ():
                add(_retry(consumer.get("groupName")), SUB)
                for sub in consumer.get("subscriptionDataSet") or ():
                    add(sub.get("topic"), SUB)
        except (ValueError, AttributeError, TypeError) as exc:
            raise AclError(f"cannot read the heartbeat body: {exc}", AT_PARSE) from exc
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        add(_retry(f.get("consumerGroup")), SUB)
        add(f.get("topic"), SUB)
    elif code in POP_CODES:
        # ours: RocketMQ's remoting ACL (4.9.7's PlainAccessValidator, 5.3.3's
        # DefaultAuthorizationContextBuilder) names no resource for the POP codes, so a
        # consumer without SUB on a topic pops it through remoting; here POP needs what PULL
        # needs. A retry topic is the group's, as for SEND_MESSAGE.
        topic = f.get("topic")
        if topic is not None and topic.startswith(RETRY_PREFIX):
            add(_retry(f.get("consumerGroup")), SUB)
        else:
            add(topic, SUB)
        add(_retry(f.get("consumerGroup")), SUB)
    elif code == RequestCode.BATCH_ACK_MESSAGE:
        try:
            acks = load_json_text((cmd.body or b"").decode("utf-8") or "{}").get("acks") or ()
            for a in acks:
                topic = a.get("t") or a.get("topic")
                group = a.get("c") or a.get("consumerGroup")
                add(_retry(group) if str(topic or "").startswith(RETRY_PREFIX) else topic, SUB)
                add(_retry(group), SUB)
        except (ValueError, AttributeError, TypeError) as exc:
            raise AclError(f"cannot read the batch ack body: {exc}", AT_PARSE) from exc
    return out


POP_CODES = frozenset({RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.PEEK_MESSAGE,
                       RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.NOTIFICATION,
                       RequestCode.POLLING_INFO})


def parse_request(cmd: RemotingCommand, peer: str | None) -> AccessRequest:
    ip = peer[:peer.rfind(":")] if peer and ":" in peer else peer
    req = AccessRequest(cmd.code, ip)
    f = cmd.ext_fields
    if not f:
        return req
    req.access_key = f.get(ACCESS_KEY)
    req.signature = f.get(SIGNATURE)
    req.resources = request_resources(cmd)
    req.content = request_content(f, cmd.body, (SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
    return req


# -- the loaded configuration -----------------------------------------------------------------
@dataclass(frozen=True)
class DataVersion:
    counter: int = 0
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_json(self) -> dict:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def next(self) -> "DataVersion":
        return DataVersion(self.counter + 1, int(time.time() * 1000))


def _version_of(data: dict) -> DataVersion:
    dv = data.get("dataVersion")
    if isinstance(dv, list) and dv and isinstance(dv[0], dict):
        try:
            return DataVersion(int(dv[0].get("counter", 0)), int(dv[0].get("timestamp", 0)))
        except (TypeError, ValueError):
            pass
    return DataVersion()


@dataclass(frozen=True)
class AclSnapshot:
    files: tuple[str, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)
    key_file: dict[str, str] = field(default_factory=dict)  # access key -> file
    global_white: tuple[Any, ...] = ()
    versions: dict[str, DataVersion] = field(default_factory=dict)
    stamps: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # see file_stamp


def validate(snap: AclSnapshot, req: AccessRequest, admin_codes: frozenset = ADMIN_CODES) -> None:
    """``PlainPermissionManager.validate``: returns when allowed, raises ``AclError`` if not.

    Stricter than RocketMQ 4.9.7: the ACL codes (``ACL_ADMIN_CODES``) skip no check for a
    globally white-listed address, and an account's white address replaces its signature but
    not the admin check of an admin code."""
    acl_code = req.code in ACL_ADMIN_CODES
    for rule in snap.global_white:
        if rule.match(req.ip) and not acl_code:
            return
    if req.access_key is None:
        raise AclError("No accessKey is configured", AT_NO_KEY)
    owned = snap.accounts.get(req.access_key)
    if owned is None:
        raise AclError(f"No acl config for {req.access_key}", AT_NO_ACCOUNT)
    if owned.white.match(req.ip):
        if req.code in admin_codes and not owned.admin:
            check_perm(req, owned, admin_codes)  # raises: an admin code needs an admin account
        return
    if cal_signature(req.content, owned.secret_key) != req.signature:
        raise AclError(f"Check signature failed for accessKey={req.access_key}", AT_SIGNATURE)
    if req.resources.get(TRACE_TOPIC) == PUB:  # message traces may always be written
        return
    check_perm(req, owned, admin_codes)


def check_perm(req: AccessRequest, owned: Account, admin_codes: frozenset = ADMIN_CODES) -> None:
    if req.code in admin_codes and not owned.admin:
        raise AclError(f"Need admin permission for request code={req.code}, but accessKey="
                       f"{owned.access_key} is not", AT_ADMIN)
    if not req.resources or (owned.perms is None and owned.admin):
        return
    refused = [r for r, needed in req.resources.items() if not _allowed(owned, r, needed)]
    if not refused:
        return
    first = next(r for r in _java_hashmap_order(list(req.resources)) if r in refused)
    listed = owned.perms is not None and first in owned.perms
    raise AclError(f"No default permission for {_describe(first)}",
                   AT_RESOURCE_PERM if listed else AT_DEFAULT_PERM)


def _allowed(owned: Account, resource: str, needed: int) -> bool:
    if owned.perms is not None and resource in owned.perms:
        return check_permission(needed, owned.perms[resource])
    if resource.startswith(RETRY_PREFIX):
        return check_permission(needed, owned.default_group_perm)
    return check_permission(needed, owned.default_topic_perm)


def acl_files(default_file: str) -> list[str]:
    """Every ACL file: ``*.yml``/``*.yaml`` under ``<dir of default>/acl`` (its ``tools.yml``
    excepted), then the default file."""
    out: list[str] = []
    acl_dir = os.path.join(os.path.dirname(default_file), "acl")
    for root, dirs, names in os.walk(acl_dir):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.endswith((".yml", ".yaml")) and path != os.path.join(acl_dir, "tools.yml"):
                out.append(os.path.normpath(path))
    default = os.path.normpath(default_file)
    if os.path.exists(default) and default not in out:
        out.append(default)
    return out


def file_stamp(path: str) -> tuple[int, int, int]:
    """What tells a changed file: mtime, size and inode (an edit within one mtime tick, or a
    file replaced by rename, still shows)."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def load_snapshot(default_file: str, read_yaml) -> AclSnapshot:
    """Read every ACL file (``PlainPermissionManager.load``); ``AclError`` names a bad file."""
    files = acl_files(default_file)
    accounts: dict[str, Account] = {}
    key_file: dict[str, str] = {}
    white: list[Any] = []
    versions: dict[str, DataVersion] = {}
    for path in files:
        data = read_yaml(path)
        if not data:
            continue
        try:
            for rule in _as_list(data.get("globalWhiteRemoteAddresses")) or ():
                white.append(parse_address_rule(rule))
            for entry in data.get("accounts") or ():
                acc = build_account(entry)
                if acc.access_key in key_file:
                    log.warning("access key %s is defined in %s and %s; the first wins",
                                acc.access_key, key_file[acc.access_key], path)
                    continue
                accounts[acc.access_key] = acc
                key_file[acc.access_key] = path
        except (AclError, AttributeError, TypeError) as exc:
            raise AclError(f"{path}: {exc}") from exc
        versions[path] = _version_of(data)
    return AclSnapshot(tuple(files), accounts, key_file, tuple(white), versions,
                       {p: file_stamp(p) for p in files})


def cluster_acl_config(snap: AclSnapshot, read_yaml, requester: str | None = None) -> dict:
    """GET_BROKER_CLUSTER_ACL_CONFIG's body (``getAllAclConfig``): read from the files. Every
    secret key but the ``requester``'s own is ``MASKED_SECRET`` (RocketMQ sends them all)."""
    whites: list[str] = []
    configs: list[dict] = []
    seen: set[str] = set()
    for path in snap.files:
        data = read_yaml(path) or {}
        whites += _as_list(data.get("globalWhiteRemoteAddresses")) or []
        for entry in data.get("accounts") or ():
            ak = str(entry.get("accessKey"))
            if ak in seen:
                continue
            seen.add(ak)
            cfg: dict[str, Any] = {"accessKey": ak, "admin": _bool(entry.get("admin"))}
            for key in ("secretKey", "whiteRemoteAddress", "defaultTopicPerm",
                        "defaultGroupPerm"):
                if entry.get(key) is not None:
                    cfg[key] = str(entry[key])
            if "secretKey" in cfg and ak != requester:
                cfg["secretKey"] = MASKED_SECRET
            for key in ("topicPerms", "groupPerms"):
                if entry.get(key) is not None:
                    cfg[key] = _as_list(entry[key])
            configs.append(dict(sorted(cfg.items())))
    return {"globalWhiteAddrs": whites, "plainAccessConfigs": configs}


def versions_json(snap: AclSnapshot, default_file: str) -> tuple[str, str]:
    """(``version``, ``allAclFileVersion``) of GET_BROKER_CLUSTER_ACL_INFO."""
    default = snap.versions.get(os.path.normpath(default_file), DataVersion(0, 0))
    compact = {"separators": (",", ":")}
    return (json.dumps(default.to_json(), **compact),
            json.dumps({p: v.to_json() for p, v in snap.versions.items()}, **compact))


__all__ = ["AclError", "Account", "AccessRequest", "AclSnapshot", "DataVersion", "DENY", "ANY",
           "PUB", "SUB", "ADMIN_CODES", "ACL_ADMIN_CODES", "MASKED_SECRET", "parse_perm", "check_permission", "build_account",
           "request_resources", "parse_request", "validate", "load_snapshot", "acl_files",
           "cluster_acl_config", "versions_json", "check_resource_perms", "file_stamp"]
