"""``rocketstore acl``: a broker's plain ACL (``aclEnable=true``), as mqadmin's ACL commands.

    rocketstore acl list    --broker 127.0.0.1:10911 [--show-secret-keys] [--json]
    rocketstore acl update  --namesrv 127.0.0.1:9876 --access-key app-user1 --secret-key s3cret99
                            [--topic-perm Orders=PUB ...] [--group-perm billing=SUB ...]
                            [--default-topic-perm DENY] [--default-group-perm SUB]
                            [--white-remote-address 10.0.0.*] [--admin]
    rocketstore acl delete  --broker 127.0.0.1:10911 --access-key app-user1
    rocketstore acl white   --broker 127.0.0.1:10911 10.10.103.* 192.168.0.*

Through ``--namesrv`` every master broker gets the change (mqadmin's ``-c``); through
``--broker`` just that one. The requests are signed with ``ROCKETMQ_ACCESS_KEY`` /
``ROCKETMQ_SECRET_KEY`` (an account of the broker's ``plain_acl.yml``). ``list`` shows secret
keys masked unless asked; it changes nothing.
"""
from __future__ import annotations

import click

from ._common import emit_json, json_option

_PERMS = click.Choice(["DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB"])


def _target(fn):
    fn = click.option("--broker", default=None, metavar="HOST:PORT", help="One broker.")(fn)
    return click.option("--namesrv", default=None, metavar="HOST:PORT[;HOST:PORT]",
                        help="Name server: every master broker it knows.")(fn)


def _check(namesrv, broker) -> None:
    if bool(namesrv) == bool(broker):
        raise click.UsageError("give exactly one of --namesrv and --broker")


@click.group("acl")
def command() -> None:
    """A broker's plain ACL: accounts, permissions, white addresses (mqadmin's ACL commands)."""


@command.command("list")
@_target
@click.option("--show-secret-keys", is_flag=True,
              help="Print the secret keys the broker sends (only the asking account's own).")
@json_option
def list_(namesrv, broker, show_secret_keys, as_json) -> None:
    """Accounts, white addresses and file versions of each broker."""
    from .live import admin_client

    _check(namesrv, broker)
    out = []
    with admin_client(namesrv, broker) as admin:
        for addr in admin.broker_addrs():
            cfg = admin.acl_config(addr)
            ver = admin.acl_version(addr)
            if not show_secret_keys:
                for acct in cfg.get("plainAccessConfigs") or []:
                    if acct.get("secretKey"):
                        acct["secretKey"] = "***"
            out.append({"broker": addr, "brokerName": ver.get("brokerName"),
                        "versions": ver.get("allAclFileVersion") or {}, **cfg})
    if as_json:
        emit_json(out)
        return
    for b in out:
        click.echo(f"{b['brokerName']} {b['broker']}")
        for path, v in b["versions"].items():
            click.echo(f"  file {path}: dataVersion {v.get('counter')}")
        click.echo(f"  globalWhiteRemoteAddresses: {', '.join(b.get('globalWhiteAddrs') or [])}")
        for a in b.get("plainAccessConfigs") or []:
            click.echo(f"  {a['accessKey']}: secretKey {a.get('secretKey', '')}"
                       f"{', admin' if a.get('admin') else ''}"
                       f", white {a.get('whiteRemoteAddress') or '-'}"
                       f", defaultTopicPerm {a.get('defaultTopicPerm') or 'DENY'}"
                       f", defaultGroupPerm {a.get('defaultGroupPerm') or 'DENY'}")
            for key in ("topicPerms", "groupPerms"):
                if a.get(key):
                    click.echo(f"    {key}: {', '.join(a[key])}")


@command.command("update")
@_target
@click.option("--access-key", required=True, help="Longer than 6 characters.")
@click.option("--secret-key", required=True, help="Longer than 6 characters.")
@click.option("--white-remote-address", default=None,
              help="Addresses that skip the signature check (e.g. 192.168.1.*).")
@click.option("--admin/--no-admin", default=False, show_default=True)
@click.option("--default-topic-perm", type=_PERMS, default=None)
@click.option("--default-group-perm", type=_PERMS, default=None)
@click.option("--topic-perm", "topic_perms", multiple=True, metavar="TOPIC=PERM")
@click.option("--group-perm", "group_perms", multiple=True, metavar="GROUP=PERM")
@json_option
def update(namesrv, broker, access_key, secret_key, white_remote_address, admin,
           default_topic_perm, default_group_perm, topic_perms, group_perms, as_json) -> None:
    """Create or update an account (mqadmin updateAclConfig)."""
    from .live import admin_client

    _check(namesrv, broker)
    with admin_client(namesrv, broker) as client:
        addrs = client.broker_addrs()
        for addr in addrs:
            client.update_acl_config(
                addr, access_key, secret_key, white_remote_address=white_remote_address,
                admin=admin, default_topic_perm=default_topic_perm,
                default_group_perm=default_group_perm,
                topic_perms=list(topic_perms) or None, group_perms=list(group_perms) or None)
    _done(as_json, {"accessKey": access_key, "brokers": addrs}, f"account {access_key} updated")


@command.command("delete")
@_target
@click.option("--access-key", required=True)
@json_option
def delete(namesrv, broker, access_key, as_json) -> None:
    """Delete an account (mqadmin deleteAccessConfig)."""
    from .live import admin_client

    _check(namesrv, broker)
    with admin_client(namesrv, broker) as client:
        addrs = client.broker_addrs()
        for addr in addrs:
            client.delete_acl_config(addr, access_key)
    _done(as_json, {"accessKey": access_key, "brokers": addrs}, f"account {access_key} deleted")


@command.command("white")
@_target
@click.option("--acl-file", default=None, help="The ACL file to change (default: the broker's "
                                                 "plain_acl.yml).")
@click.argument("addresses", nargs=-1, required=True)
@json_option
def white(namesrv, broker, acl_file, addresses, as_json) -> None:
    """Replace globalWhiteRemoteAddresses (mqadmin updateGlobalWhiteAddr)."""
    from .live import admin_client

    _check(namesrv, broker)
    with admin_client(namesrv, broker) as client:
        addrs = client.broker_addrs()
        for addr in addrs:
            client.update_global_white_addrs(addr, list(addresses), acl_file)
    _done(as_json, {"globalWhiteRemoteAddresses": list(addresses), "brokers": addrs},
          f"globalWhiteRemoteAddresses: {', '.join(addresses)}")


def _done(as_json: bool, result: dict, text: str) -> None:
    if as_json:
        emit_json(result)
    else:
        click.echo(f"{text} on {', '.join(result['brokers'])}")
