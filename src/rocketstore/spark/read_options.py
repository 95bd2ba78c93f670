"""The options of the CommitLog source (``.load(path)`` and its ``.option(...)``s) and the
column check every reader (batch, stream, network) applies to a requested schema."""
from __future__ import annotations

import os

from ..format.batch import parse_delay_levels
from .arrow_columns import SCHEMA_DDL, arrow_schema
from .segments import DEFAULT_WINDOW_BYTES, commitlog_dir


def _bool(v: str | None, default: bool = False) -> bool:
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no", ""):
        return False
    raise ValueError(f"expected true/false, got {v!r}")


def check_options(opts: dict, known: tuple[str, ...], what: str) -> None:
    """Refuse an option nobody reads, naming the nearest known one (a typo never passes)."""
    import difflib
    lower = {k.lower(): k for k in known}
    for k in opts:
        if k.lower() in lower:
            continue
        near = difflib.get_close_matches(k.lower(), list(lower), n=1, cutoff=0.6)
        hint = f"; did you mean {lower[near[0]]!r}?" if near else ""
        raise ValueError(f"{what}: unknown option {k!r}{hint} (known: {', '.join(known)})")


def credentials_of(opts: dict, what: str):
    """``accessKey``/``secretKey`` → SessionCredentials (both or neither; the secret is never
    repeated in a message)."""
    ak, sk = opts.get("accesskey"), opts.get("secretkey")
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise ValueError(f"{what}: give both accessKey and secretKey (ACL), or neither")
    from ..client import SessionCredentials
    return SessionCredentials(str(ak), str(sk))


FILE_OPTIONS = ("path", "paths", "commitLogDir", "checkCrc", "splitSize", "windowBytes",
                "messageDelayLevel", "pushdown", "topic")
FILE_STREAM_OPTIONS = ("maxFilesPerTrigger", "maxRecordsPerTrigger", "maxBytesPerTrigger",
                       "startingOffset", "startingOffsets", "failOnDataLoss")


def store_topics(root: str) -> set[str] | None:
    """The topics a store's ``config/topics.json`` lists (None without that file)."""
    import json
    try:
        with open(os.path.join(root, "config", "topics.json"), "rb") as f:
            data = json.loads(f.read().decode("utf-8") or "{}")
    except (OSError, ValueError):
        return None
    table = data.get("topicConfigTable")
    return set(table) if isinstance(table, dict) else None


class ReadOptions:
    """Parsed options shared by the batch and the stream reader (plain, picklable data)."""

    def __init__(self, options: dict, *, streaming: bool = False) -> None:
        check_options(options, FILE_OPTIONS + FILE_STREAM_OPTIONS, "rocketmq file source")
        opts = {str(k).lower(): v for k, v in options.items()}
        if not streaming:
            for name in FILE_STREAM_OPTIONS:
                if opts.get(name.lower()) not in (None, ""):
                    raise ValueError(f"option {name} is for streaming reads only "
                                     "(spark.readStream); this is a batch read")
        self.root = opts.get("path")
        if not self.root:
            raise ValueError("rocketmq source: give the store directory, e.g. .load('/path/to/store')")
        # made absolute here, on the driver (planning): executors run in other directories
        self.root = os.path.abspath(self.root)
        topics = opts.get("topic")
        self.topics = ({t.strip() for t in str(topics).split(",") if t.strip()}
                       if topics else None)
        if self.topics:
            known = store_topics(self.root)
            missing = sorted(self.topics - known) if known is not None else []
            if missing:
                raise ValueError(f"rocketmq file source: topic {', '.join(missing)} does not "
                                 f"exist in the store {self.root} (config/topics.json)")
        cl = opts.get("commitlogdir")
        self.cl_dir = commitlog_dir(self.root, os.path.abspath(cl) if cl else None)
        self.check_crc = _bool(opts.get("checkcrc"))
        split = str(opts.get("splitsize", "auto")).strip().lower()
        self.split_size: int | None = None if split == "auto" else int(split)
        self.window_bytes = int(opts.get("windowbytes", DEFAULT_WINDOW_BYTES))
        spec = opts.get("messagedelaylevel")
        self.delay_levels = parse_delay_levels(spec) if spec else None
        self.opts = opts


def _columns(schema) -> list[str]:
    """Requested column names, checked against the types we produce."""
    from pyspark.sql.pandas.types import to_arrow_schema
    names = schema.fieldNames()
    want = to_arrow_schema(schema, timezone="UTC")
    ours = arrow_schema(names)  # raises for unknown names
    for f in want:
        if not ours.field(f.name).type.equals(f.type):
            raise ValueError(f"rocketmq column {f.name!r} is {ours.field(f.name).type}, "
                             f"not {f.type}: use the types of {SCHEMA_DDL}")
    return names
