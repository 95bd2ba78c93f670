"""Where a tier is and how to open it, for every reader of a tier without a broker: the Spark
tier source and stream, ``rocketstore export`` and ``rocketstore verify``. A tier is a posix
base directory (holding ``<md5(cluster)[:8]>_<cluster>`` directories) or ``s3://bucket/prefix``
with ``objectStoreEndpoint``/``objectStoreAccessKey``/``objectStoreSecretKey``/
``objectStoreRegion`` options, else AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... from the
environment. No pyspark here: the command line uses it without Spark.
"""
from __future__ import annotations

from ..store.tier import layout
from .read_options import check_options

# the options as users spell them (Spark hands them over lowercased)
TIER_NAMES = ("path", "objectStoreEndpoint", "objectStoreAccessKey", "objectStoreSecretKey",
              "objectStoreRegion", "pushdown", "checkCrc")
TIER_OPTIONS = tuple(n.lower() for n in TIER_NAMES)


def tier_options(options: dict, names: tuple[str, ...] = TIER_NAMES,
                 what: str = "rocketmq tier source") -> dict:
    """``options`` lowercased (as Spark hands them over), any not in ``names`` refused naming
    the nearest known one (``read_options.check_options``), a posix ``path`` made absolute (on
    the driver: executors run elsewhere). The tier source, the tier stream and
    ``rocketstore export``/``verify`` on a tier all read their options through here."""
    import os
    check_options(options, names, what)
    opts = {str(k).lower(): v for k, v in options.items()}
    path = str(opts.get("path") or "")
    if not path.startswith(("s3://", "s3a://")):
        opts["path"] = os.path.abspath(path)
    return opts


def is_tier_path(path: str | None) -> bool:
    """``s3://...``, or a directory holding ``<md5(cluster)[:8]>_<cluster>`` directories."""
    import os
    if not path:
        return False
    if path.startswith(("s3://", "s3a://")):
        return True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    hits = [n for n in names if "_" in n and layout.cluster_dir(n.split("_", 1)[1]) == n]
    return bool(hits) and not os.path.isdir(os.path.join(path, "commitlog"))


def open_tier_backend(opts: dict):
    path = opts["path"]
    if path.startswith(("s3://", "s3a://")):
        from ..store.tier.s3 import S3Backend, s3_filesystem
        fs = s3_filesystem(opts.get("objectstoreendpoint", ""), opts.get("objectstoreaccesskey", ""),
                           opts.get("objectstoresecretkey", ""), opts.get("objectstoreregion", ""))
        return S3Backend.from_url(path.replace("s3a://", "s3://", 1), fs)
    from ..store.tier.posix import PosixBackend
    return PosixBackend(path)
