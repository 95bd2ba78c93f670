"""``RemotingCommand``: one request or response of RocketMQ's remoting protocol.

A command is plain data: ``code`` (request code, or response code in a response), ``language``
(the sender's ``LanguageCode`` name), ``version``, ``opaque`` (the request id a response echoes),
``flag`` (bit 0 response, bit 1 oneway), ``remark``, ``ext_fields`` (the header fields, always
``str -> str`` once decoded) and ``body`` bytes. ``serialize_type`` records how the header was (or
will be) written, because a broker answers in the serialisation of the request.

Theory of operation: requests are built with ``RemotingCommand.request(code, fields, body)``
(a process-wide counter gives the opaque); the receiving side
answers with ``cmd.response(code, fields=..., remark=..., body=...)``, which copies the opaque and
the serialisation and sets the response flag, as ``NettyRemotingAbstract`` does.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Mapping

from .codes import RPC_ONEWAY, RPC_TYPE_RESPONSE, SERIALIZE_JSON

# The version a 4.9 broker puts in its commands (MQVersion V4_9_4 ordinal: clients at or above it
# accept standard JSON route bodies).
BROKER_VERSION = 401

_opaques = itertools.count(1)


def next_opaque() -> int:
    """A process-wide request id (31-bit, wraps)."""
    return next(_opaques) & 0x7FFFFFFF


def to_ext_str(value: object) -> str:
    """Coerce one header value to the string Java's ``HashMap<String,String>`` would hold."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(slots=True)
class RemotingCommand:
    code: int
    language: str = "PYTHON"
    version: int = BROKER_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: int = SERIALIZE_JSON

    # -- flags ------------------------------------------------------------------------------------
    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def request(cls, code: int, fields: Mapping[str, object] | None = None, body: bytes = b"",
                *, oneway: bool = False, language: str = "PYTHON",
                serialize_type: int = SERIALIZE_JSON) -> "RemotingCommand":
        ext = {k: v if type(v) is str else to_ext_str(v)
               for k, v in (fields or {}).items() if v is not None}
        return cls(code=int(code), language=language, opaque=next_opaque(),
                   flag=RPC_ONEWAY if oneway else 0, ext_fields=ext, body=body,
                   serialize_type=serialize_type)

    def response(self, code: int, fields: Mapping[str, object] | None = None, *,
                 remark: str | None = None, body: bytes = b"") -> "RemotingCommand":
        """The answer to this request: same opaque and serialisation, response flag set."""
        ext = {k: v if type(v) is str else to_ext_str(v)
               for k, v in (fields or {}).items() if v is not None}
        return RemotingCommand(code=int(code), language="JAVA", version=BROKER_VERSION,
                               opaque=self.opaque, flag=RPC_TYPE_RESPONSE, remark=remark,
                               ext_fields=ext, body=body, serialize_type=self.serialize_type)

    # -- typed access to ext fields ---------------------------------------------------------------
    def get_str(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)

    def require_str(self, name: str) -> str:
        v = self.ext_fields.get(name)
        if v is None or v == "":
            raise ValueError(f"the {name} field is required")
        return v

    def get_int(self, name: str, default: int | None = None) -> int | None:
        v = self.ext_fields.get(name)
        if v is None or v == "" or v == "null":
            return default
        try:
            return int(v)
        except ValueError:
            try:
                return int(float(v))
            except ValueError as exc:
                raise ValueError(f"the {name} field must be an integer, not {v!r}") from exc

    def require_int(self, name: str) -> int:
        v = self.get_int(name)
        if v is None:
            raise ValueError(f"the {name} field is required")
        return v

    def get_bool(self, name: str, default: bool = False) -> bool:
        v = self.ext_fields.get(name)
        if v is None or v == "":
            return default
        return v.strip().lower() in ("true", "1", "yes")
