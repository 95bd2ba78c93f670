"""The S3 backend: each segment one object, ``<prefix>/<segment key>`` in the bucket (the same
layout as the posix tier). Through ``pyarrow.fs.S3FileSystem``: pyarrow is already a
dependency (the Spark source's columns), it speaks to any S3-compatible endpoint, and Spark
readers get the same filesystem with no second client library.

S3 cannot append, so ``append`` writes the object anew (what was there, cut to ``position``,
plus the new bytes): a PUT is atomic, so a crash leaves the old object or the new one, never a
torn one. Segments stay small (``tieredStoreCommitLogMaxSize``), which bounds the rewrite.
Credentials are never logged (``TierConfig`` keeps them out of its repr).
"""
from __future__ import annotations

import os
from urllib.parse import urlparse


def s3_filesystem(endpoint: str = "", access_key: str = "", secret_key: str = "", region: str = ""):
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
    return fs.S3FileSystem(**kw)


class S3Backend:
    def __init__(self, filesystem, bucket: str, prefix: str = "") -> None:
        self.fs = filesystem
        self.root = "/".join(p for p in (bucket, prefix.strip("/")) if p)

    @classmethod
    def from_config(cls, tcfg) -> "S3Backend":
        return cls(s3_filesystem(tcfg.object_store_endpoint, tcfg.object_store_access_key,
                                 tcfg.object_store_secret_key, tcfg.object_store_region),
                   tcfg.object_store_bucket, tcfg.file_path)

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
        info = self.fs.get_file_info(self._path(key))
        return info.size if info.type == fs.FileType.File else 0

    def append(self, key: str, position: int, data: bytes) -> None:
        old = self.read(key, 0, position) if position else b""
        if len(old) != position:
            raise OSError(f"{key}: object holds {len(old)} bytes, append at {position}")
        with self.fs.open_output_stream(self._path(key)) as out:
            out.write(old + bytes(data))

    def read(self, key: str, position: int, length: int) -> bytes:
        from pyarrow import fs
        path = self._path(key)
        info = self.fs.get_file_info(path)
        if info.type != fs.FileType.File or length <= 0 or position >= info.size:
            return b""
        with self.fs.open_input_file(path) as f:
            return f.read_at(min(length, info.size - position), position)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        from pyarrow import fs
        base = f"{self.root}/{prefix}".rstrip("/") if prefix else self.root
        try:
            infos = self.fs.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        cut = len(self.root) + 1
        return sorted((i.path[cut:], i.size) for i in infos if i.type == fs.FileType.File)

    def truncate(self, key: str, size: int) -> None:
        data = self.read(key, 0, size)
        with self.fs.open_output_stream(self._path(key)) as out:
            out.write(data)

    def delete(self, key: str) -> None:
        try:
            self.fs.delete_file(self._path(key))
        except FileNotFoundError:
            pass
