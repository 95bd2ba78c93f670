"""The ``rocketstore`` command line.

Each sub-command lives in its own module under ``rocketstore.commands`` and exposes a click
command named ``command`` (or a list ``commands``); this module discovers them, so features add
commands without editing a shared file. Errors print ``error: <message>`` on stderr and exit 1
(a user error) or 2 (a usage error); ``verify`` keeps fsck's meaning (1 damaged, 2 cannot
check). A closed stdout (``| head -1``) ends a command quietly with 141, as ``cat``.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import select
import signal
import sys
from typing import NoReturn

import click

from . import commands as _commands_pkg
from .commands._common import broker_message
from .errors import RocketStoreError


USER_ERROR = 1  # bad input, a missing store or topic, a broker that refused or is gone
USAGE_ERROR = 2  # the command line itself is wrong


class _Group(click.Group):
    """One error convention for every command: the message on stderr after ``error:``, exit 1
    for a user error, 2 for a usage error (with the usage line and the ``--help`` hint)."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            if stdout_closed():
                closed_pipe()
            raise
        except click.UsageError as exc:
            if exc.ctx is not None:
                click.echo(exc.ctx.get_usage(), err=True)
                click.echo(f"Try '{exc.ctx.command_path} --help' for help.", err=True)
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(USAGE_ERROR)
        except click.ClickException as exc:
            if isinstance(exc.__cause__, BrokenPipeError) and stdout_closed():
                closed_pipe()
            click.echo(f"error: {readable(exc.format_message())}", err=True)
            sys.exit(USER_ERROR)
        except (RocketStoreError, FileNotFoundError, PermissionError, ValueError) as exc:
            click.echo(f"error: {readable(broker_message(exc))}", err=True)
            sys.exit(USER_ERROR)


def stdout_closed() -> bool:
    """Whether whoever read our stdout has gone (``| head -1`` exited): the pipe's write end
    then polls as an error."""
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def closed_pipe() -> NoReturn:
    """End quietly, as ``cat`` does when its reader goes away: no message, status 128 + SIGPIPE
    (141); what is still buffered for stdout goes nowhere."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(128 + signal.SIGPIPE)


_ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
_JAVA_FRAME = re.compile(r",?\s*org\.apache\.rocketmq\.[\w.$]+\([\w]+\.java:\d+\)")


def readable(message: str) -> str:
    """A broker's answer as a person reads it: RocketMQ's ACL refusal (which names a Java
    exception and source line, kept on the wire for Java clients' sake) without those, plus
    what to do about it."""
    if _ACL_EXCEPTION not in message:
        return message
    text = _JAVA_FRAME.sub("", message.replace(_ACL_EXCEPTION, "")).rstrip(", ")
    if os.environ.get("ROCKETMQ_ACCESS_KEY"):
        hint = (f"refused by the broker's ACL for access key "
                f"{os.environ['ROCKETMQ_ACCESS_KEY']!r}: check its permissions in plain_acl.yml")
    else:
        hint = ("refused by the broker's ACL: set ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY "
                "to sign requests with an account")
    return f"{text} ({hint})"


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
