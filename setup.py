"""Build of the optional compiled core (``_speedups`` Cython modules); metadata is in pyproject.

``pip install .`` / ``pip install -e .`` compile each ``src/rocketstore/**/_speedups*.pyx`` with
the machine's C compiler (Cython comes from ``build-system.requires``, so nothing downloads at run
time). A failure to compile — no compiler, no Python headers — is not a failed install: the build
prints a warning and installs the pure-Python package, which is complete on its own
(``rocketstore/_native.py``). ``ROCKETSTORE_PURE_PYTHON=1`` at build time skips compilation.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PYX = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "src").rglob("_speedups*.pyx"))


def _warn(msg: str) -> None:
    print(f"WARNING: rocketstore: {msg}; installing the pure-Python code only", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """``build_ext`` that turns any compile error into a warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure means: no compiled core
            _warn(f"building the compiled speedups failed ({exc})")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            _warn(f"compiling {ext.name} failed ({exc})")


def _extensions() -> list:
    if os.environ.get("ROCKETSTORE_PURE_PYTHON", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        _warn(f"Cython is not available ({exc})")
        return []
    try:
        return cythonize(PYX, compiler_directives={"language_level": "3"}, quiet=True)
    except Exception as exc:  # noqa: BLE001
        _warn(f"cythonize failed ({exc})")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
