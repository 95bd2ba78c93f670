"""``rocketstore controller`` as a process, spoken to as RocketMQ 5.3.3's brokers and mqadmin
speak to it: its decisions survive SIGKILL, a master's closed connection elects another member
of the SyncStateSet, and bad requests are refused with RocketMQ's codes."""
from __future__ import annotations

import asyncio
import time

from rocketstore.client.transport import RemotingClient
from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.controller.codes import ControllerResponse as R
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.fastjson import dumps, loads

from .conftest import body_of, call, write_conf

CL, BN = "DefaultCluster", "broker-a"


class FakeBrokerLink:
    """The requests a RocketMQ 5 broker's ReplicasManager sends, on one connection (its
    heartbeats' connection is how the controller sees it die)."""

    def __init__(self, ctl: str, addr: str) -> None:
        self.ctl, self.addr = ctl, addr
        self.c = RemotingClient(ctl)
        self.id: int | None = None

    async def ask(self, code, fields=None, body=None) -> RemotingCommand:
        b = b"" if body is None else dumps(body).encode()
        return await self.c.invoke(RemotingCommand.request(code, fields or {}, b, language="JAVA"))

    async def join(self, offset: int = 0) -> int:
        await self.c.connect()
        r = await self.ask(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CL, "brokerName": BN})
        self.id = int(r.ext_fields["nextBrokerId"])
        r = await self.ask(Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
                           "appliedBrokerId": self.id, "registerCheckCode": f"{self.addr};{time.time()}"})
        assert r.code == R.SUCCESS, r.remark
        await self.beat(offset)
        r = await self.ask(Q.CONTROLLER_REGISTER_BROKER, {"clusterName": CL, "brokerName": BN,
                           "brokerId": self.id, "brokerAddress": self.addr})
        assert r.code == R.SUCCESS, r.remark
        return self.id

    async def beat(self, offset: int = 0, epoch: int = 1) -> None:
        self.c.invoke_oneway(RemotingCommand.request(Q.BROKER_HEARTBEAT, {
            "clusterName": CL, "brokerName": BN, "brokerAddr": self.addr, "brokerId": self.id,
            "epoch": epoch, "maxOffset": offset, "confirmOffset": offset,
            "heartbeatTimeoutMills": 60000, "electionPriority": 1}, oneway=True, language="JAVA"))
        await asyncio.sleep(0.05)


def replica_info(addr: str) -> tuple[dict, dict]:
    r = call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
    assert r.code == R.SUCCESS, r.remark
    return r.ext_fields, body_of(r)


def test_decisions_survive_sigkill_and_a_dead_master_is_replaced(tmp_path, controllers):
    conf = write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "store"),
                      scanNotActiveBrokerInterval=500)
    ctl = controllers(conf, str(tmp_path / "ctl.log"))

    async def first():
        b1, b2 = FakeBrokerLink(ctl.addr, "127.0.0.1:1001"), FakeBrokerLink(ctl.addr, "127.0.0.1:1002")
        assert await b1.join() == 1
        r = await b1.ask(Q.CONTROLLER_ELECT_MASTER, {"clusterName": CL, "brokerName": BN,
                                                    "brokerId": 1, "designateElect": False})
        assert r.code == R.SUCCESS and r.ext_fields["masterEpoch"] == "1", r.remark
        assert loads(r.body)["syncStateSet"] == [1]
        assert await b2.join() == 2
        r = await b1.ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                         {"brokerName": BN, "masterBrokerId": 1, "masterEpoch": 1},
                         {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == R.SUCCESS and r.ext_fields["newSyncStateSetEpoch"] == "2", r.remark
        ctl.kill()  # SIGKILL right after the answers (before the brokers' connections close,
        b1.c.close()  # which would be a master's death)
        b2.c.close()
    asyncio.run(first())

    ctl = controllers(conf, str(tmp_path / "ctl.log"))
    assert ctl.ready["groups"] == 1
    head, body = replica_info(ctl.addr)
    assert (head["masterBrokerId"], head["masterAddress"], head["masterEpoch"]) == ("1", "127.0.0.1:1001", "1")
    assert body == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    assert call(ctl.addr, Q.CONTROLLER_GET_NEXT_BROKER_ID,
                {"clusterName": CL, "brokerName": BN}).ext_fields["nextBrokerId"] == "3"
    r = call(ctl.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": 2, "registerCheckCode": "127.0.0.1:9;1"})
    assert r.code == R.CONTROLLER_BROKER_ID_INVALID

    async def failover():
        b1, b2 = FakeBrokerLink(ctl.addr, "127.0.0.1:1001"), FakeBrokerLink(ctl.addr, "127.0.0.1:1002")
        await b1.c.connect()
        await b2.c.connect()
        b1.id, b2.id = 1, 2
        await b1.beat(100)
        await b2.beat(100)
        t0 = time.monotonic()
        b1.c.close()  # the master's connection dies (as a SIGKILLed broker's does)
        while time.monotonic() - t0 < 10:
            r = await b2.ask(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
            if r.ext_fields.get("masterBrokerId") == "2":
                break
            await asyncio.sleep(0.05)
        assert r.ext_fields["masterBrokerId"] == "2" and r.ext_fields["masterEpoch"] == "2"
        assert time.monotonic() - t0 < 2
        assert loads(r.body) == {"syncStateSet": [2], "syncStateSetEpoch": 3}
        # the fenced old master cannot change the set any more
        r = await b2.ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                         {"brokerName": BN, "masterBrokerId": 1, "masterEpoch": 1},
                         {"syncStateSet": [1, 2], "syncStateSetEpoch": 3})
        assert r.code == R.CONTROLLER_INVALID_MASTER
        ctl.kill()  # while the new master is still connected (its close would elect again)
        b2.c.close()
    asyncio.run(failover())
    ctl = controllers(conf, str(tmp_path / "ctl.log"))
    head, body = replica_info(ctl.addr)
    assert (head["masterBrokerId"], head["masterEpoch"]) == ("2", "2")
    assert body == {"syncStateSet": [2], "syncStateSetEpoch": 3}
    assert ctl.stop() == 0


def test_bad_requests_get_rocketmqs_codes(tmp_path, controllers):
    ctl = controllers(write_conf(str(tmp_path / "c.conf"), str(tmp_path / "store")))
    a = ctl.addr
    r = call(a, Q.CONTROLLER_GET_REPLICA_INFO, {})
    assert r.code == R.SYSTEM_ERROR and "brokerName" in r.remark
    assert call(a, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "x"}).code == R.CONTROLLER_BROKER_METADATA_NOT_EXIST
    r = call(a, Q.BROKER_HEARTBEAT, {"clusterName": CL, "brokerName": BN})
    assert r.code == R.CONTROLLER_INVALID_REQUEST and r.remark == "Heart beat with empty brokerId"
    assert call(a, Q.CONTROLLER_ELECT_MASTER, {"brokerName": "x", "brokerId": 1}).code == \
        R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    r = call(a, Q.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": BN, "masterBrokerId": 1,
             "masterEpoch": 1}, b"{not json")
    assert r.code == R.SYSTEM_ERROR
    r = call(a, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": "one", "registerCheckCode": "h;1"})
    assert r.code == R.SYSTEM_ERROR and "appliedBrokerId" in r.remark
    assert call(a, Q.CONTROLLER_GET_SYNC_STATE_DATA, {}).code == R.SYSTEM_ERROR
    assert call(a, Q.GET_BROKER_EPOCH_CACHE, {}).code == R.REQUEST_CODE_NOT_SUPPORTED
    r = call(a, Q.UPDATE_CONTROLLER_CONFIG, {}, b"controllerStorePath=/tmp/elsewhere\n")
    assert r.code == R.NO_PERMISSION
    r = call(a, Q.UPDATE_CONTROLLER_CONFIG, {}, b"enableElectUncleanMaster=maybe\n")
    assert r.code == R.SYSTEM_ERROR and "enableElectUncleanMaster" in r.remark
    assert call(a, Q.UPDATE_CONTROLLER_CONFIG, {}, b"enableElectUncleanMaster=true\n").code == R.SUCCESS
    text = call(a, Q.GET_CONTROLLER_CONFIG, {}).body.decode()
    assert "enableElectUncleanMaster=true" in text and "listenPort=" in text
    r = call(a, Q.CONTROLLER_GET_METADATA_INFO, {})
    assert r.ext_fields["controllerLeaderAddress"] == a and r.ext_fields["isLeader"] == "true"
    assert ctl.stop() == 0


def test_the_most_caught_up_member_wins_then_priority(tmp_path, controllers):
    """Three members in the SyncStateSet; the master's connection closes: the member whose
    heartbeat reports the highest max offset is elected; at equal offsets the lower
    brokerElectionPriority wins."""
    ctl = controllers(write_conf(str(tmp_path / "c.conf"), str(tmp_path / "store")))

    async def scenario(offsets: dict[int, int], priorities: dict[int, int]) -> str:
        links = {i: FakeBrokerLink(ctl.addr, f"127.0.0.1:{2000 + i}") for i in (1, 2, 3)}
        for i, link in links.items():
            await link.join()
        bn_fields = {"clusterName": CL, "brokerName": BN}
        r = await links[1].ask(Q.CONTROLLER_ELECT_MASTER, {**bn_fields, "brokerId": links[1].id})
        epoch = int(r.ext_fields["masterEpoch"])
        ss_epoch = int(r.ext_fields["syncStateSetEpoch"])
        r = await links[1].ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                               {"brokerName": BN, "masterBrokerId": links[1].id, "masterEpoch": epoch},
                               {"syncStateSet": [links[i].id for i in (1, 2, 3)],
                                "syncStateSetEpoch": ss_epoch})
        assert r.code == R.SUCCESS, r.remark
        for i in (2, 3):
            links[i].c.invoke_oneway(RemotingCommand.request(Q.BROKER_HEARTBEAT, {
                **bn_fields, "brokerAddr": links[i].addr, "brokerId": links[i].id, "epoch": epoch,
                "maxOffset": offsets[i], "heartbeatTimeoutMills": 60000,
                "electionPriority": priorities[i]}, oneway=True, language="JAVA"))
        await asyncio.sleep(0.2)
        links[1].c.close()
        for _ in range(100):
            r = await links[2].ask(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
            if r.ext_fields.get("masterBrokerId") not in (None, str(links[1].id)):
                break
            await asyncio.sleep(0.05)
        winner = r.ext_fields["masterAddress"]
        r = await links[2].ask(Q.CLEAN_BROKER_DATA, {**bn_fields, "isCleanLivingBroker": True})
        assert r.code == R.SUCCESS, r.remark
        for link in links.values():
            link.c.close()
        await asyncio.sleep(0.2)
        return winner

    assert asyncio.run(scenario({2: 100, 3: 500}, {2: 1, 3: 9})) == "127.0.0.1:2003"
    assert asyncio.run(scenario({2: 500, 3: 500}, {2: 1, 3: 9})) == "127.0.0.1:2002"
    assert asyncio.run(scenario({2: 500, 3: 500}, {2: 9, 3: 1})) == "127.0.0.1:2003"


def test_a_restarted_controller_gives_the_master_one_heartbeat_timeout(tmp_path, controllers):
    """After a restart nobody is known alive. A slave heartbeating first must not get the living
    master deposed; a master that stays silent for a heartbeat timeout (10 s) is replaced."""
    conf = write_conf(str(tmp_path / "c.conf"), str(tmp_path / "store"),
                      scanNotActiveBrokerInterval=300, scanInactiveMasterInterval=300)
    ctl = controllers(conf)

    async def setup():
        b1, b2 = FakeBrokerLink(ctl.addr, "127.0.0.1:3001"), FakeBrokerLink(ctl.addr, "127.0.0.1:3002")
        await b1.join()
        await b1.ask(Q.CONTROLLER_ELECT_MASTER, {"clusterName": CL, "brokerName": BN, "brokerId": 1})
        await b2.join()
        r = await b1.ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                         {"brokerName": BN, "masterBrokerId": 1, "masterEpoch": 1},
                         {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == R.SUCCESS
        ctl.kill()
        b1.c.close()
        b2.c.close()
    asyncio.run(setup())
    ctl = controllers(conf)
    t0 = time.monotonic()

    async def after_restart():
        b2 = FakeBrokerLink(ctl.addr, "127.0.0.1:3002")
        await b2.c.connect()
        b2.id = 2
        await b2.beat(0)
        await asyncio.sleep(3)
        r = await b2.ask(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
        assert r.ext_fields["masterBrokerId"] == "1", "a silent-for-3-s master was deposed"
        while time.monotonic() - t0 < 20:
            r = await b2.ask(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
            if r.ext_fields.get("masterBrokerId") == "2":
                break
            await asyncio.sleep(0.2)
        assert r.ext_fields["masterBrokerId"] == "2" and r.ext_fields["masterEpoch"] == "2"
        assert 9 < time.monotonic() - t0 < 14
        b2.c.close()
    asyncio.run(after_restart())


def _scrape(url: str) -> dict[str, list[tuple[dict, float]]]:
    """name -> [(labels, value)] of a Prometheus text page, parsed by prometheus-client."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_metrics_show_each_group_and_its_last_failover(tmp_path, controllers):
    conf = write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "store"),
                      scanNotActiveBrokerInterval=500)
    ctl = controllers(conf, str(tmp_path / "ctl.log"), "--metrics-port", "0")
    url = ctl.ready["metrics"]
    assert url.startswith("http://127.0.0.1:")

    async def scenario():
        b1, b2 = FakeBrokerLink(ctl.addr, "127.0.0.1:1001"), FakeBrokerLink(ctl.addr, "127.0.0.1:1002")
        await b1.join()
        await b1.ask(Q.CONTROLLER_ELECT_MASTER, {"clusterName": CL, "brokerName": BN,
                                                "brokerId": 1, "designateElect": False})
        await b2.join()
        r = await b1.ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                         {"brokerName": BN, "masterBrokerId": 1, "masterEpoch": 1},
                         {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == R.SUCCESS
        first = _scrape(url)
        b1.c.close()  # the master's heartbeat connection dies
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            r = await b2.ask(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
            if r.ext_fields.get("masterBrokerId") == "2":
                break
            await asyncio.sleep(0.05)
        after = _scrape(url)
        b2.c.close()
        return first, after
    first, after = asyncio.run(scenario())
    lv = {"cluster": CL, "broker_name": BN}

    def one(m, name):
        vals = [v for labels, v in m.get(name, []) if all(labels.get(k) == x for k, x in lv.items())]
        assert len(vals) == 1, (name, m.get(name))
        return vals[0]
    assert first["rocketstore_controller_leader"][0][1] == 1
    assert (one(first, "rocketstore_controller_master_broker_id"),
            one(first, "rocketstore_controller_master_epoch"),
            one(first, "rocketstore_controller_sync_state_set_replicas"),
            one(first, "rocketstore_controller_replicas_alive")) == (1, 1, 2, 2)
    assert "rocketstore_controller_last_failover_info" not in first  # a first master is none
    assert (one(after, "rocketstore_controller_master_broker_id"),
            one(after, "rocketstore_controller_master_epoch"),
            one(after, "rocketstore_controller_sync_state_set_replicas"),
            one(after, "rocketstore_controller_replicas_alive")) == (2, 2, 1, 1)
    [(info, _)] = after["rocketstore_controller_last_failover_info"]
    assert (info["from_id"], info["to_id"], info["epoch"]) == ("1", "2", "2")
    assert info["reason"] == "master 1: its heartbeat connection closed"
    assert 0 <= one(after, "rocketstore_controller_last_failover_seconds") < 5
    assert abs(one(after, "rocketstore_controller_last_failover_timestamp_seconds") - time.time()) < 60
    assert after["rocketstore_controller_elections_total"][0][1] == 2
