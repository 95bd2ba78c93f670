"""The console with the broker's ACL on (``aclEnable=true``): who is asking, and what they see.

Accounts are those of the broker's ``plain_acl.yml`` (``broker.acl``): the access key is the
user name, the secret key the password. A browser signs in with the form at ``/login`` and gets
a session cookie (random, server-side, ``HttpOnly``, ``SameSite=Strict``, dropped by
``/logout``, by the account's removal or a new secret, and after ``SESSION_TTL_S``); scripts send
HTTP Basic (``curl -u ak:sk``). Without either, a page redirects to ``/login`` and ``/api/``
answers 401. A white-listed address signs in like any other: the console has no unsigned access.

What an account sees (``AclSource``) follows its permissions as the broker applies them: a topic
with any permission (PUB or SUB) is listed with its queues and offsets; a consumer group with any
permission on it is listed; message search, message pages and bodies need SUB on the message's
topic; an admin account without resource entries sees everything. Whatever it may not see does
not exist for it (404), so names do not leak either; a search it may not run is refused (403).

Guessing is slowed (``SignInThrottle``): failed sign-ins (form or Basic) are counted per client
address and per access key; after ``FREE_FAILURES`` each further try must wait twice as long as
the one before (1 s, 2 s, 4 s ... up to ``MAX_DELAY_S``), and a try inside that wait is answered
429 with ``Retry-After`` without the secret being checked (nor counted). Each lock-out is
logged as a warning naming the address or account and its wait; a success clears both counts,
and a count is forgotten ``FORGET_S`` after its last failure.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from typing import Any

from ..broker.acl.plain import ANY, RETRY_PREFIX, SUB, Account, check_permission

log = logging.getLogger(__name__)
SESSION_COOKIE = "rocketstore_session"
SESSION_TTL_S = 8 * 3600
REALM = 'Basic realm="rocketstore console", charset="UTF-8"'


def _fingerprint(account: Account) -> str:
    return hashlib.sha256(f"{account.access_key}\0{account.secret_key}".encode()).hexdigest()


def may(account: Account, resource: str, needed: int) -> bool:
    """Whether ``account`` holds ``needed`` on ``resource`` (a topic or ``%RETRY%group``), as the
    broker's ``check_perm`` decides."""
    if account.admin and account.perms is None:
        return True
    if account.perms is not None and resource in account.perms:
        return check_permission(needed, account.perms[resource])
    default = account.default_group_perm if resource.startswith(RETRY_PREFIX) \
        else account.default_topic_perm
    return check_permission(needed, default)


FREE_FAILURES = 3  # failed sign-ins allowed before the waits start
MAX_DELAY_S = 300.0  # the longest wait between tries
FORGET_S = 900.0  # a count is dropped this long after its last failure
MAX_TRACKED = 10_000  # counts kept at most (the oldest dropped first)


class Throttled(Exception):
    """A sign-in tried inside its wait; ``retry_after_s`` says how long is left."""

    def __init__(self, retry_after_s: float, who: str) -> None:
        super().__init__(f"too many failed sign-ins from {who}: try again in "
                         f"{max(1, round(retry_after_s))} s")
        self.retry_after_s = retry_after_s


class SignInThrottle:
    """Failed sign-ins per key (``addr:<ip>``, ``account:<access key>``): growing waits."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._fails: dict[str, tuple[int, float]] = {}  # key -> (failures, time of the last)

    @staticmethod
    def delay_s(failures: int) -> float:
        if failures < FREE_FAILURES:
            return 0.0
        return min(MAX_DELAY_S, 2.0 ** (failures - FREE_FAILURES))

    def check(self, *keys: str) -> None:
        """Raise ``Throttled`` when any key is inside its wait."""
        now = self.clock()
        with self._lock:
            for key in keys:
                n, last = self._fails.get(key, (0, 0.0))
                if n and now - last > FORGET_S:
                    self._fails.pop(key, None)
                    continue
                left = last + self.delay_s(n) - now
                if left > 0:
                    raise Throttled(left, key.partition(":")[2] or key)

    def failed(self, *keys: str) -> None:
        now = self.clock()
        with self._lock:
            for key in keys:
                n = self._fails.pop(key, (0, 0.0))[0] + 1
                self._fails[key] = (n, now)  # re-inserted: newest last
                if n >= FREE_FAILURES:  # at most one a wait: tries inside it do not count
                    kind, _, name = key.partition(":")
                    log.warning("console sign-in: %s %r locked out for %.0f s after %d failed "
                                "sign-ins", "client address" if kind == "addr" else "account",
                                name, self.delay_s(n), n)
            while len(self._fails) > MAX_TRACKED:
                self._fails.pop(next(iter(self._fails)))

    def succeeded(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._fails.pop(key, None)


class ConsoleAuth:
    """Sessions and credentials against the broker's permission manager."""

    def __init__(self, manager: Any, ttl_s: float = SESSION_TTL_S) -> None:
        self.manager = manager
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[str, str, float]] = {}  # token -> (ak, print, expiry)
        self.failures = 0
        self.throttle = SignInThrottle()

    def check(self, access_key: str, secret_key: str, client: str | None = None) -> Account | None:
        """The account these credentials sign in as; None when wrong. Raises ``Throttled``
        inside the wait of the client address or the account (the secret is not checked)."""
        keys = (f"account:{access_key}",) + ((f"addr:{client}",) if client else ())
        self.throttle.check(*keys)
        account = self.manager.snapshot.accounts.get(access_key)
        if account is None or not hmac.compare_digest(account.secret_key.encode(),
                                                      secret_key.encode()):
            self.failures += 1
            self.throttle.failed(*keys)
            return None
        self.throttle.succeeded(*keys)
        return account

    def login(self, access_key: str, secret_key: str, client: str | None = None) -> str | None:
        account = self.check(access_key, secret_key, client)
        if account is None:
            return None
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._sessions = {t: s for t, s in self._sessions.items() if s[2] > now}
            self._sessions[token] = (account.access_key, _fingerprint(account), now + self.ttl_s)
        return token

    def logout(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._sessions.pop(token, None)

    def session(self, token: str | None) -> Account | None:
        if not token:
            return None
        with self._lock:
            found = self._sessions.get(token)
        if found is None:
            return None
        ak, fp, expiry = found
        account = self.manager.snapshot.accounts.get(ak)
        if expiry < time.monotonic() or account is None or _fingerprint(account) != fp:
            self.logout(token)  # expired, deleted, or its secret changed
            return None
        return account

    def basic(self, header: str | None, client: str | None = None) -> Account | None:
        if not header or not header[:6].lower() == "basic ":
            return None
        try:
            ak, sep, sk = base64.b64decode(header[6:].strip(), validate=True).decode(
                "utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return self.check(ak, sk, client) if sep else None

    def who(self, cookies: dict, authorization: str | None,
            client: str | None = None) -> Account | None:
        return self.session(cookies.get(SESSION_COOKIE)) or self.basic(authorization, client)


class Refused(ValueError):
    """A search the account may not run (no SUB on the topic)."""


class AclSource:
    """A console source seen through one account's permissions (see the module text)."""

    def __init__(self, source: Any, account: Account) -> None:
        self._src = source
        self.account = account

    def __getattr__(self, name: str) -> Any:  # cluster_name, title, address, tps...
        return getattr(self._src, name)

    def _topic(self, topic: str) -> bool:
        return may(self.account, topic, ANY)

    def _read(self, topic: str) -> bool:
        return may(self.account, topic, SUB)

    def _group(self, group: str) -> bool:
        return may(self.account, RETRY_PREFIX + group, ANY)

    def tier(self) -> dict | None:
        """The tier's queues of the topics this account sees (the totals are the broker's)."""
        t = self._src.tier()
        if t is None:
            return None
        return {**t, "queues": [q for q in t["queues"] if self._topic(q["topic"])],
                "damaged": [d for d in t["damaged"] if self._topic(d["topic"])],
                "missing": [d for d in t["missing"] if self._topic(d["topic"])]}

    def overview(self) -> dict:
        """The broker's overview with the counts of what this account sees."""
        from .views import is_system_group

        o = dict(self._src.overview())
        groups = self.group_names()
        system_groups = sum(1 for g in groups if is_system_group(g))
        tvs = self.topics()
        o.update(topics=sum(1 for t in tvs if not t.system),
                 system_topics=sum(1 for t in tvs if t.system),
                 messages=sum(t.messages for t in tvs if not t.system),
                 groups=len(groups) - system_groups, system_groups=system_groups)
        return o

    def topic_names(self) -> list[str]:
        return [t for t in self._src.topic_names() if self._topic(t)]

    def topics(self) -> list:
        return [t for t in self._src.topics() if self._topic(t.topic)]

    def topic(self, name: str) -> Any:
        return self._src.topic(name) if self._topic(name) else None

    def group_names(self) -> list[str]:
        return [g for g in self._src.group_names() if self._group(g)]

    def groups(self) -> list:
        return [g for g in self._src.groups() if self._group(g.group)]

    def group(self, name: str) -> Any:
        return self._src.group(name) if self._group(name) else None

    def _need_sub(self, topic: str) -> None:
        if not self._read(topic):
            raise Refused(f"topic: {self.account.access_key} has no SUB permission on {topic!r}")

    def find_by_key(self, topic: str, key: str, max_num: int, begin: int, end: Any) -> list:
        self._need_sub(topic)
        return self._src.find_by_key(topic, key, max_num, begin, end)

    def find_by_time(self, topic: str, begin: int, end: int, max_num: int) -> list:
        self._need_sub(topic)
        return self._src.find_by_time(topic, begin, end, max_num)

    def find_by_id(self, msg_id: str, topic: str | None) -> list:
        return [m for m in self._src.find_by_id(msg_id, topic) if self._read(m.topic)]

    def find_by_offset(self, offset: int) -> list:
        return [m for m in self._src.find_by_offset(offset) if self._read(m.topic)]

    def body(self, msg_id: str) -> bytes | None:
        return self._src.body(msg_id) if self.find_by_id(msg_id, None) else None


__all__ = ["ConsoleAuth", "AclSource", "Refused", "SignInThrottle", "Throttled", "may", "SESSION_COOKIE", "REALM"]
