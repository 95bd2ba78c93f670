"""Fixtures for the index tests (helpers live in index_helpers.py)."""
from .index_helpers import rmq_fixture  # noqa: F401
