"""Remote-address rules of RocketMQ's plain ACL (``RemoteAddressStrategyFactory``).

A rule is written as in ``plain_acl.yml``: blank (matches nothing), ``*`` / ``*.*.*.*`` (matches
every address), one address (``192.168.0.1``, IPv6 too), a list (``192.168.0.1,192.168.0.2``), a
list in braces (``192.168.1.{1,2,3}``), or a range (``192.168.*.*``, ``192.168.1.1-100``,
``2001:db8::1-ff``). ``parse_address_rule`` raises ``AclError`` on a malformed rule, naming it;
``rule.match(ip)`` takes the client's IP without its port.

Theory of operation: the rules follow RocketMQ 4.9.7's exactly, quirks included — a range rule
is decided by its *first* ``*`` or ``a-b`` part (``192.*.1.1`` admits every ``192.x.*.*``), and a
list is split on commas without trimming.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass


class AclError(Exception):
    """RocketMQ's ``AclException``: ``where`` is the Java frame RocketMQ names in its remark."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    @property
    def remark(self) -> str:
        """The remark RocketMQ 4.9.7 answers a refused request with (SYSTEM_ERROR)."""
        text = f"org.apache.rocketmq.acl.common.AclException: {self.message}"
        return f"{text}, {self.where}" if self.where else text


def _is_v4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
        return True
    except ValueError:
        return False


def _is_v6(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s)
        return True
    except ValueError:
        return False


def _split(s: str, sep: str) -> list[str]:
    """Commons-lang ``StringUtils.split``: no empty tokens."""
    return [p for p in s.split(sep) if p]


def expand_ip(addr: str, parts: int) -> str:
    """``AclUtils.expandIP``: upper-case, ``::`` expanded, each group padded to 4 digits."""
    addr = addr.upper()
    pad = parts - addr.count(":")
    if pad > 0:
        addr = addr.replace("::", ":" * (pad + 1))
    return ":".join(g.rjust(4, "0") for g in addr.split(":"))


def _bad(addr: str) -> AclError:
    return AclError(f"Netaddress examine Exception netaddress is {addr}")


class _Nothing:
    def match(self, ip: str | None) -> bool:
        return False


class _Anything:
    def match(self, ip: str | None) -> bool:
        return True


@dataclass(frozen=True)
class _One:
    addr: str

    def match(self, ip: str | None) -> bool:
        return ip is not None and expand_ip(self.addr, 8) == expand_ip(ip, 8)


@dataclass(frozen=True)
class _Many:
    addrs: frozenset[str]

    def match(self, ip: str | None) -> bool:
        if ip is None:
            return False
        return (expand_ip(ip, 8) if _is_v6(ip) else ip) in self.addrs


def _many(addrs: list[str]) -> _Many:
    out = set()
    for a in addrs:
        if _is_v4(a):
            out.add(a)
        elif _is_v6(a):
            out.add(expand_ip(a, 8))
        else:
            raise _bad(a)
    return _Many(frozenset(out))


@dataclass(frozen=True)
class _Range:
    head: str | None
    index: int
    start: int
    end: int
    v6: bool

    def match(self, ip: str | None) -> bool:
        if ip is None or self.head is None:
            return False
        if _is_v4(ip):
            if self.v6 or not ip.startswith(self.head):
                return False
            octets = ip.split(".")
            return self.start <= int(octets[self.index]) <= self.end
        if _is_v6(ip):
            full = expand_ip(ip, 8)
            if not full.startswith(self.head):
                return False
            return self.start <= int(full[5 * self.index:5 * self.index + 4], 16) <= self.end
        return False


def _range_part(value: str, v6: bool) -> tuple[int, int] | None:
    value = value.strip()
    hi_max = 0xFFFF if v6 else 255
    if value == "*":
        return 0, hi_max
    if "-" in value:
        if value.startswith("-"):
            raise AclError("RangeRemoteAddressStrategy netaddress examine scope Exception "
                           f"value {value} ")
        lo_s, hi_s = _split(value, "-")[:2]
        try:
            lo, hi = int(lo_s, 16 if v6 else 10), int(hi_s, 16 if v6 else 10)
        except ValueError as exc:
            raise _bad(value) from exc
        if not (0 <= lo <= hi <= hi_max):
            raise AclError("RangeRemoteAddressStrategy netaddress examine scope Exception "
                           f"start is {lo} , end is {hi}")
        return lo, hi
    return None


def _range(addr: str) -> _Range:
    v6 = ":" in addr
    if v6:
        star, minus = addr.find("*"), addr.find("-")
        if star > -1 and star != len(addr) - 1:
            raise AclError(f"Netaddress examine scope Exception netaddress is {addr}")
        parts = _split(addr, ":")
        for i in range(1, len(parts)):
            got = _range_part(parts[i], True)
            if got and got[1] > 0:
                if star > -1 and minus > -1:
                    n, sub = 6, addr[:addr[:addr.rfind(":")].rfind(":")]
                elif star == -1 and minus == -1:
                    n, sub = 8, addr
                else:
                    n, sub = 7, addr[:addr.rfind(":")]
                head = expand_ip(sub, n)
                return _Range(head, len(_split(head, ":")), got[0], got[1], True)
        return _Range(None, 0, 0, 0, True)
    parts = _split(addr, ".")
    for i in (1, 2, 3):
        if i >= len(parts):
            break
        got = _range_part(parts[i], False)
        if got and got[1] > 0:
            if len(parts) != 4:
                raise AclError(f"Netaddress examine scope Exception netaddress is {addr}")
            for p in parts[:i - 1]:
                if not p.strip().isdigit() or not 0 <= int(p) <= 255:
                    raise AclError(f"Netaddress examine scope Exception netaddress is {addr}")
            return _Range(".".join(p.strip() for p in parts[:i]) + ".", i, got[0], got[1], False)
    return _Range(None, 0, 0, 0, False)


NOTHING = _Nothing()
ANYTHING = _Anything()


def parse_address_rule(rule: object) -> object:
    """A matcher (``.match(ip) -> bool``) for one ``whiteRemoteAddress`` / global white rule."""
    if rule is None or not str(rule).strip():
        return NOTHING
    addr = str(rule)
    if addr in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return ANYTHING
    if addr.endswith("}"):
        parts = _split(addr, ":" if ":" in addr else ".")
        if ":" not in addr and len(parts) < 4:
            raise AclError("MultipleRemoteAddressStrategy has got a/some wrong format IP(s) ")
        last = parts[-1]
        if not last.startswith("{"):
            raise AclError("MultipleRemoteAddressStrategy netaddress examine scope Exception "
                           "netaddress")
        prefix = addr[:addr.index("{")]
        return _many([prefix + p for p in _split(last[1:-1], ",")])
    if "," in addr:
        return _many(_split(addr, ","))
    if "*" in addr or "-" in addr:
        return _range(addr)
    if not (_is_v4(addr) or _is_v6(addr)):
        raise _bad(addr)
    return _One(addr)


__all__ = ["AclError", "parse_address_rule", "expand_ip", "NOTHING", "ANYTHING"]
