"""The S3 backend: each segment one object, ``<prefix>/<segment key>`` in the bucket (the same
layout as the posix tier). Through ``pyarrow.fs.S3FileSystem``: pyarrow is already a
dependency (the Spark source's columns), it speaks to any S3-compatible endpoint, and Spark
readers get the same filesystem with no second client library.

S3 cannot append, so ``append`` writes the object anew (what was there, cut to ``position``,
plus the new bytes): a PUT is atomic, so a crash leaves the old object or the new one, never a
torn one. Segments stay small (``tieredStoreCommitLogMaxSize``), which bounds the rewrite.
Credentials are never logged (``TierConfig`` keeps them out of its repr).

**When the server misbehaves.** Every call is tried ``attempts`` times with exponential backoff
(0.1 s doubling to 5 s) on an I/O error — a refused or dropped connection, a timeout, an HTTP
500/503 or throttling answer — and only then raises ``TierBackendError``, whose message (like
every log line here) has the access and secret keys scrubbed out. Calls time out after
``objectStoreRequestTimeout`` seconds, so a stalled server is an error, not a hang. Retrying is
safe: ``append`` writes ``old[:position] + data`` whatever the object holds beyond
``position``, so a PUT that reached the server but whose answer was lost is simply written
again. **Whole-object checksum:** the AWS SDK under pyarrow sends a CRC64NVME of the whole object
with every upload (S3's flexible checksums; versitygw stores it beside the object) and checks
it on every GET of a whole object; a mismatch that survives the retries raises
``TierChecksumError`` (the service then repairs the segment, ``repair``). A ranged GET carries
no checksum: a record read from the middle of a segment is checked by its own CRC instead, and
``salvage`` reads a damaged object in ranges. **Multipart:** pyarrow's output stream sends an object above its part size (10 MiB) as
a multipart upload (a single PUT below it); a failed part aborts the whole upload, so the
object is the old one or the new one, never a mix.
"""
from __future__ import annotations

import logging
import os
import time
from urllib.parse import urlparse

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


# answers no retry changes: wrong credentials or no such bucket
_FINAL = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
          "NoSuchBucket", "NO_SUCH_BUCKET")


class TierBackendError(OSError):
    """The object store failed a call after every retry."""


class TierChecksumError(TierBackendError):
    """An object's bytes do not match the whole-object checksum the server keeps for it."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


# the AWS SDK under pyarrow, when a whole-object GET fails the object's stored checksum
_CHECKSUM = "checksums mismatch"
SALVAGE_PART = 8 << 20  # bytes per ranged GET when salvaging (a range carries no checksum)


def s3_filesystem(endpoint: str = "", access_key: str = "", secret_key: str = "", region: str = "",
                  timeout: float = 30.0):
    from pyarrow import fs
    kw: dict = {}
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint:
        u = urlparse(endpoint if "://" in endpoint else "http://" + endpoint)
        kw["endpoint_override"] = u.netloc
        kw["scheme"] = u.scheme or "http"
    ak = access_key or os.environ.get("AWS_ACCESS_KEY_ID", "")
    sk = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if ak and sk:
        kw["access_key"], kw["secret_key"] = ak, sk
    kw["region"] = region or os.environ.get("AWS_REGION", "") or "us-east-1"
    kw["allow_bucket_creation"] = True
    kw["request_timeout"] = kw["connect_timeout"] = float(timeout)
    kw["retry_strategy"] = fs.AwsStandardS3RetryStrategy(max_attempts=1)  # ours retries (S3Backend)
    return fs.S3FileSystem(**kw)


class S3Backend:
    def __init__(self, filesystem, bucket: str, prefix: str = "", *, attempts: int = 5,
                 secrets: tuple[str, ...] = ()) -> None:
        self.fs = filesystem
        self.root = "/".join(p for p in (bucket, prefix.strip("/")) if p)
        self.attempts = max(1, attempts)
        self._secrets = tuple(x for x in secrets if x)
        self.retries = 0  # calls that failed and were tried again (for operators)

    @classmethod
    def from_config(cls, tcfg) -> "S3Backend":
        return cls(s3_filesystem(tcfg.object_store_endpoint, tcfg.object_store_access_key,
                                 tcfg.object_store_secret_key, tcfg.object_store_region,
                                 tcfg.object_store_timeout),
                   tcfg.object_store_bucket, tcfg.file_path, attempts=tcfg.object_store_attempts,
                   secrets=(tcfg.object_store_access_key, tcfg.object_store_secret_key,
                            os.environ.get("AWS_ACCESS_KEY_ID", ""),
                            os.environ.get("AWS_SECRET_ACCESS_KEY", "")))

    def scrub(self, text: str) -> str:
        for x in self._secrets:
            text = text.replace(x, "***")
        return text

    def _call(self, what: str, key: str, fn):
        delay = BACKOFF_FIRST
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except (FileNotFoundError, ValueError):
                raise
            except OSError as e:
                msg = self.scrub(f"{type(e).__name__}: {e}")
                if attempt == self.attempts and _CHECKSUM in msg:
                    raise TierChecksumError(f"object store: {self.root}/{key} fails its "
                                            f"whole-object checksum ({msg})", key) from None
                if attempt == self.attempts or any(m in msg for m in _FINAL):
                    raise TierBackendError(f"object store: {what} {self.root}/{key} failed "
                                           f"{attempt} time(s), last: {msg}") from None
                self.retries += 1
                log.warning("object store: %s %s/%s failed (%s); try %d of %d in %.1f s",
                            what, self.root, key, msg, attempt + 1, self.attempts, delay)
                time.sleep(delay)
                delay = min(BACKOFF_MAX, delay * 2)

    @classmethod
    def from_url(cls, url: str, filesystem) -> "S3Backend":
        u = urlparse(url)
        return cls(filesystem, u.netloc, u.path)

    def _path(self, key: str) -> str:
        if any(p in ("", ".", "..") for p in key.split("/")):
            raise ValueError(f"bad tier key {key!r}")
        return f"{self.root}/{key}"

    def size(self, key: str) -> int:
        from pyarrow import fs
        info = self._call("stat", key, lambda: self.fs.get_file_info(self._path(key)))
        return info.size if info.type == fs.FileType.File else 0

    def _put(self, key: str, data: bytes) -> None:
        def put():
            with self.fs.open_output_stream(self._path(key)) as out:
                out.write(data)
        self._call("put", key, put)

    def append(self, key: str, position: int, data: bytes) -> None:
        old = self.read(key, 0, position) if position else b""
        if len(old) != position:
            raise TierBackendError(f"object store: {self.root}/{key} holds {len(old)} bytes, "
                                   f"cannot append at {position}")
        self._put(key, old + bytes(data))

    def read(self, key: str, position: int, length: int) -> bytes:
        from pyarrow import fs
        path = self._path(key)

        def get():
            info = self.fs.get_file_info(path)
            if info.type != fs.FileType.File or length <= 0 or position >= info.size:
                return b""
            want = min(length, info.size - position)
            with self.fs.open_input_file(path) as f:
                got = f.read_at(want, position)
            if len(got) != want:  # a connection cut mid-body: never hand back a short read
                raise OSError(f"short read: {len(got)} of {want} bytes")
            return got
        return self._call("get", key, get)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        from pyarrow import fs
        base = f"{self.root}/{prefix}".rstrip("/") if prefix else self.root

        def ls():
            try:
                return self.fs.get_file_info(fs.FileSelector(base, recursive=True,
                                                             allow_not_found=True))
            except FileNotFoundError:
                return []
        infos = self._call("list", prefix, ls)
        cut = len(self.root) + 1
        return sorted((i.path[cut:], i.size) for i in infos if i.type == fs.FileType.File)

    def truncate(self, key: str, size: int) -> None:
        self._put(key, self.read(key, 0, size))

    def replace(self, key: str, data: bytes) -> None:
        self._put(key, bytes(data))  # a PUT is atomic: the old object or the new one

    def salvage(self, key: str) -> bytes:
        """The object in ranged GETs (at least two), so the SDK checks no whole-object
        checksum: the bytes as the server holds them, damaged or not."""
        n = self.size(key)
        if n <= 1:
            return self.read(key, 0, n) if n else b""
        step = min(SALVAGE_PART, (n + 1) // 2)
        return b"".join(self.read(key, pos, min(step, n - pos)) for pos in range(0, n, step))

    def delete(self, key: str) -> None:
        def rm():
            try:
                self.fs.delete_file(self._path(key))
            except FileNotFoundError:
                pass
        self._call("delete", key, rm)
