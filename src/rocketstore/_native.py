"""Which compiled speedups this process uses.

Some per-message functions have a compiled twin, a Cython module named ``_speedups`` beside the
pure-Python module it accelerates (``remoting/_speedups.pyx`` for the frame and header codec).
The pure module is the specification and stays complete; at import it asks ``load`` for its twin
and, when there is one, rebinds its public names to the compiled functions. Both paths give
byte-identical results (``tests/remoting/test_speedups.py``, hypothesis).

``ROCKETSTORE_PURE_PYTHON=1`` (any value but empty or ``0``) makes every module use pure Python.
A build without a C compiler installs no ``_speedups`` (``setup.py`` warns and carries on); then
everything runs on the pure path, as with the variable set. ``active()`` says which twins loaded.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from types import ModuleType

PURE_PYTHON = os.environ.get("ROCKETSTORE_PURE_PYTHON", "") not in ("", "0")
_loaded: dict[str, bool] = {}


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None (pure Python asked for, not built, or broken)."""
    if PURE_PYTHON:
        _loaded[name] = False
        return None
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        spec = None
    if spec is None:  # not built: the install warned already
        _loaded[name] = False
        return None
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:  # built for another interpreter, say
        warnings.warn(f"{name} is present but does not load ({exc}); using pure Python",
                      RuntimeWarning, stacklevel=2)
        _loaded[name] = False
        return None
    _loaded[name] = True
    return mod


def active() -> dict[str, bool]:
    """Each compiled twin asked for so far, and whether it is in use."""
    return dict(_loaded)
