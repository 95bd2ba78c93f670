"""The ``rocketstore`` command line.

Each sub-command lives in its own module under ``rocketstore.commands`` and exposes a click
command named ``command`` (or a list ``commands``); this module discovers them, so features add
commands without editing a shared file. Errors print one line and exit non-zero.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from . import commands as _commands_pkg
from .errors import RocketStoreError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except RocketStoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except (FileNotFoundError, PermissionError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rocketstore")
def main() -> None:
    """rocketstore: a RocketMQ-compatible message store, broker and Spark pipeline."""


def _register() -> None:
    for info in sorted(pkgutil.iter_modules(_commands_pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{_commands_pkg.__name__}.{info.name}")
        for cmd in getattr(mod, "commands", None) or [getattr(mod, "command", None)]:
            if isinstance(cmd, click.Command):
                main.add_command(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
