"""RocketMQ's request signature (``AclSigner`` / ``AclClientRPCHook``): sans-IO, shared by the
client that signs and the broker that checks.

Theory of operation: a signed request carries ``AccessKey`` (and optionally ``SecurityToken``)
among its ext fields, then ``Signature`` = base64(HmacSHA1(secretKey, content)), where content is
the UTF-8 concatenation of the ext field *values* in the order of their keys (Java ``TreeMap``,
i.e. UTF-16 code-unit order), ``Signature`` left out, followed by the body bytes. The broker
also leaves out ``_UNIQUE_KEY_QUERY`` (a field some clients add after signing).
"""
from __future__ import annotations

import base64
import hmac
from typing import Mapping

from .command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def request_content(fields: Mapping[str, str], body: bytes | None,
                    skip: tuple[str, ...] = (SIGNATURE,)) -> bytes:
    """The bytes a signature covers: field values in key order, then the body."""
    keys = sorted(fields)
    if not "".join(keys).isascii():  # String.compareTo: UTF-16 code units
        keys.sort(key=lambda k: k.encode("utf-16-be"))
    text = "".join([fields[k] for k in keys if k not in skip]).encode("utf-8")
    return text + body if body else text


def cal_signature(data: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(secret_key, data)), as ``AclSigner.calSignature``."""
    return base64.b64encode(hmac.digest(secret_key.encode("utf-8"), data, "sha1")).decode("ascii")


def sign_request(cmd: RemotingCommand, access_key: str, secret_key: str,
                 security_token: str | None = None) -> RemotingCommand:
    """Add ``AccessKey`` (``SecurityToken``) and ``Signature`` to ``cmd`` in place, as
    ``AclClientRPCHook.doBeforeRequest`` does; returns ``cmd``."""
    ext = cmd.ext_fields
    ext[ACCESS_KEY] = access_key
    if security_token is not None:
        ext[SECURITY_TOKEN] = security_token
    ext.pop(SIGNATURE, None)
    ext[SIGNATURE] = cal_signature(request_content(ext, cmd.body), secret_key)
    return cmd


__all__ = ["ACCESS_KEY", "SECRET_KEY", "SIGNATURE", "SECURITY_TOKEN", "UNIQUE_MSG_QUERY_FLAG",
           "request_content", "cal_signature", "sign_request"]
