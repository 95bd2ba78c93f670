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


class ReadOptions:
    """Parsed options shared by the batch and the stream reader (plain, picklable data)."""

    def __init__(self, options: dict) -> None:
        opts = {str(k).lower(): v for k, v in options.items()}
        self.root = opts.get("path")
        if not self.root:
            raise ValueError("rocketmq source: give the store directory, e.g. .load('/path/to/store')")
        # made absolute here, on the driver (planning): executors run in other directories
        self.root = os.path.abspath(self.root)
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
