"""The console of a broker with ``aclEnable=true``, attacked as a script (raw HTTP) and used as a
person would (real headless Chromium). Before: anyone reaching the port read message bodies of
a DENY topic through ``/api/messages``, and any ``Host`` was served (DNS rebinding). Now: sign-in
(form + session cookie, or HTTP Basic), per-account views by the account's topic/group
permissions, bodies only with SUB, and only our own Host names answered."""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request

import pytest

pytest.importorskip("starlette")
from rocketstore.client import PullConsumer, Producer, SessionCredentials  # noqa: E402

from ..broker.conftest import free_port, start_server  # noqa: E402
from ..broker.test_acl import ACL_YML, ADMIN, write_acl_home  # noqa: E402
from .conftest import CHROMIUM_ARGS, ensure_chromium  # noqa: E402

VIEWER = ("viewer01", "viewer-secret")
YML = ACL_YML + """\
  - accessKey: viewer01
    secretKey: viewer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - topicB=SUB
      - topicP=PUB
    groupPerms:
      - groupB=SUB
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    store, conf = write_acl_home(tmp_path_factory.mktemp("console-acl"), YML)
    cport = free_port()
    srv = start_server(store, "--config", conf, "--console", str(cport))
    try:
        ids = {}
        with Producer("PGC", srv.namesrv, credentials=ADMIN) as p:
            for topic in ("topicA", "topicB", "topicP"):
                ids[topic] = p.send(topic, f"secret body of {topic}".encode(), keys=["k1"],
                                    queue_id=0).offset_msg_id
        for group in ("groupA", "groupB"):  # two groups with committed offsets
            with PullConsumer(group, srv.namesrv, credentials=ADMIN) as c:
                c.commit_offset("topicB", 0, 1)
        srv.url = f"http://127.0.0.1:{cport}"
        srv.ids = ids
        yield srv
    finally:
        assert srv.stop() == 0, srv.log()


def _get(url: str, auth: tuple[str, str] | None = None, host: str | None = None):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode())
    if host:
        req.add_header("Host", host)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_anonymous_script_reads_nothing(console):
    status, headers, body = _get(console.url + "/api/messages?mode=key&topic=topicA&key=k1")
    assert status == 401 and b"secret body" not in body
    assert headers["WWW-Authenticate"].startswith("Basic")
    status, headers, _ = _get(console.url + "/topics")
    assert status == 303 and headers["location"] == "/login?next=%2Ftopics"
    status, _, body = _get(console.url + f"/message/{console.ids['topicA']}/body")
    assert status == 401 and b"secret" not in body
    assert _get(console.url + "/api/topics", ("viewer01", "wrong-secret"))[0] == 401


def test_basic_auth_sees_by_permission(console):
    status, _, body = _get(console.url + "/api/topics", VIEWER)
    assert status == 200
    assert sorted(t["topic"] for t in json.loads(body)) == ["topicB", "topicP"]
    status, _, body = _get(console.url + "/api/groups", VIEWER)
    assert [g["group"] for g in json.loads(body)] == ["groupB"]
    status, _, body = _get(console.url + "/api/messages?mode=key&topic=topicB&key=k1", VIEWER)
    assert status == 200 and [m["body_preview"] for m in json.loads(body)] == \
        ["secret body of topicB"]
    for topic in ("topicA", "topicP"):  # DENY, and PUB without SUB: no bodies
        status, _, body = _get(console.url + f"/api/messages?mode=key&topic={topic}&key=k1",
                               VIEWER)
        assert status == 403 and b"no SUB permission" in body and b"secret body" not in body
        mid = console.ids[topic]
        status, _, body = _get(console.url + f"/api/messages?mode=id&msg_id={mid}", VIEWER)
        assert status == 200 and json.loads(body) == []
        status, _, body = _get(console.url + f"/api/messages?mode=id&msg_id={mid}",
                               (ADMIN.access_key, ADMIN.secret_key))  # the admin finds it
        assert [m["topic"] for m in json.loads(body)] == [topic]
        assert _get(console.url + f"/message/{mid}/body", VIEWER)[0] == 404
    assert _get(console.url + f"/message/{console.ids['topicB']}/body", VIEWER)[2] == \
        b"secret body of topicB"
    assert _get(console.url + "/topics/topicA", VIEWER)[0] == 404  # not even its name
    status, _, body = _get(console.url + "/api/topics", (ADMIN.access_key, ADMIN.secret_key))
    assert {"topicA", "topicB", "topicP"} <= {t["topic"] for t in json.loads(body)}


def test_host_header_is_checked_with_acl_too(console):
    port = console.url.rsplit(":", 1)[1]
    status, _, body = _get(console.url + "/api/topics", VIEWER, host=f"attacker.example:{port}")
    assert status == 400 and b"secret" not in body


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    path = ensure_chromium()
    with sync_api.sync_playwright() as p:
        # attacker.example resolves to us, as a DNS-rebinding page makes it
        b = p.chromium.launch(executable_path=path, headless=True, args=[
            *CHROMIUM_ARGS, "--host-resolver-rules=MAP attacker.example 127.0.0.1"])
        try:
            yield b
        finally:
            b.close()


def test_sign_in_in_the_browser(console, chromium, tmp_path):
    ctx = chromium.new_context()
    page = ctx.new_page()
    try:
        page.goto(console.url + "/topics")
        assert page.url.endswith("/login?next=%2Ftopics")
        page.fill("#access_key", "viewer01")
        page.fill("#secret_key", "not-it")
        with page.expect_navigation():
            page.click("#sign-in")
        assert "wrong secret key" in page.inner_text("#login-error")
        page.fill("#access_key", VIEWER[0])
        page.fill("#secret_key", VIEWER[1])
        with page.expect_navigation():
            page.click("#sign-in")
        assert page.url == console.url + "/topics"
        assert "viewer01" in page.inner_text("#account")
        listed = page.eval_on_selector_all("#topics tbody tr",
                                           "rows => rows.map(r => r.cells[0].innerText.trim())")
        assert sorted(t.split()[0] for t in listed) == ["topicB", "topicP"]
        [cookie] = [c for c in ctx.cookies() if c["name"] == "rocketstore_session"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert "rocketstore_session" not in page.evaluate("() => document.cookie")
        page.screenshot(path=str(tmp_path / "console-acl-topics.png"))
        # a page's own script (same origin) gets bodies of topicB only
        got = page.evaluate("""async () => {
            const a = await fetch('/api/messages?mode=key&topic=topicB&key=k1');
            const b = await fetch('/api/messages?mode=key&topic=topicA&key=k1');
            return [a.status, await a.text(), b.status, await b.text()]; }""")
        assert got[0] == 200 and "secret body of topicB" in got[1]
        assert got[2] == 403 and "secret body" not in got[3]
        page.goto(console.url + f"/message/{console.ids['topicA']}")
        assert "secret body" not in page.content()
        with page.expect_navigation():
            page.click("#sign-out")
        page.goto(console.url + "/topics")
        assert "/login" in page.url
    finally:
        ctx.close()


def test_dns_rebinding_page_gets_nothing(console, chromium):
    """A page served as attacker.example (resolving to 127.0.0.1) is the attacker's origin:
    the browser sends ``Host: attacker.example``; the console answers 400 whatever the path."""
    ctx = chromium.new_context(http_credentials={"username": VIEWER[0],
                                                 "password": VIEWER[1]})
    page = ctx.new_page()
    try:
        port = console.url.rsplit(":", 1)[1]
        resp = page.goto(f"http://attacker.example:{port}/api/messages?mode=key&topic=topicB"
                         "&key=k1")
        assert resp.status == 400 and "secret body" not in page.content()
        assert "httpAllowedHosts" in page.content()
        resp = page.goto(f"http://localhost:{port}/api/topics")  # our own names still work
        assert resp.status == 200 and "topicB" in page.content()
    finally:
        ctx.close()


def test_acl_off_console_stays_open(tmp_path):
    """Without the ACL the console is what it was: open on 127.0.0.1, no sign-in."""
    cport = free_port()
    srv = start_server(str(tmp_path / "store"), "--console", str(cport))
    try:
        assert _get(f"http://127.0.0.1:{cport}/api/topics")[0] == 200
        assert _get(f"http://127.0.0.1:{cport}/topics")[0] == 200
        assert _get(f"http://127.0.0.1:{cport}/api/topics", host="attacker.example")[0] == 400
    finally:
        assert srv.stop() == 0, srv.log()


def _basic_from(url: str, path: str, auth: tuple[str, str] | None, source: str,
                body: bytes | None = None) -> tuple[int, dict, bytes]:
    """One request from the client address ``source`` (127.0.0.x): a Basic-authenticated GET,
    or a POST of ``body`` (the sign-in form)."""
    import http.client
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode()
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request("GET" if body is None else "POST", path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    finally:
        conn.close()


def test_guessing_secrets_is_slowed_per_address_and_per_account(tmp_path):
    import time

    FREE_FAILURES = 3  # the console's documented free tries  # noqa: N806
    store, conf = write_acl_home(tmp_path, YML)
    cport = free_port()
    srv = start_server(store, "--config", conf, "--console", str(cport))
    url = f"http://127.0.0.1:{cport}"
    try:
        # one account guessed from one address: free tries, then a wait that doubles
        for _ in range(FREE_FAILURES):
            assert _basic_from(url, "/api/topics", ("viewer01", "guess"), "127.0.0.1")[0] == 401
        status, headers, _ = _basic_from(url, "/api/topics", VIEWER, "127.0.0.1")
        assert status == 429 and headers["retry-after"] == "1"  # the right secret waits too
        # the account is throttled from any address
        status, _, _ = _basic_from(url, "/api/topics", VIEWER, "127.0.0.2")
        assert status == 429
        time.sleep(1.1)
        assert _basic_from(url, "/api/topics", ("viewer01", "guess"), "127.0.0.3")[0] == 401
        status, headers, _ = _basic_from(url, "/api/topics", VIEWER, "127.0.0.3")
        assert status == 429 and headers["retry-after"] == "2"  # 1 s, then 2 s, ...
        time.sleep(2.1)
        assert _basic_from(url, "/api/topics", VIEWER, "127.0.0.3")[0] == 200  # clears it
        assert _basic_from(url, "/api/topics", VIEWER, "127.0.0.2")[0] == 200
        # one address guessing many accounts: throttled by address, other addresses are not
        for i in range(FREE_FAILURES):
            assert _basic_from(url, "/api/topics", (f"nobody{i}", "x"), "127.0.0.4")[0] == 401
        assert _basic_from(url, "/api/topics", ("nobody9", "x"), "127.0.0.4")[0] == 429
        assert _basic_from(url, "/api/topics", VIEWER, "127.0.0.4")[0] == 429
        assert _basic_from(url, "/api/topics", VIEWER, "127.0.0.5")[0] == 200
        # the sign-in form is throttled the same way
        codes = []
        for _ in range(FREE_FAILURES + 1):
            status, _, page = _basic_from(url, "/login", None, "127.0.0.6",
                                          b"access_key=formuser&secret_key=x")
            codes.append(status)
        assert codes == [401] * FREE_FAILURES + [429], codes
        assert b"Too many failed sign-ins: try again in 1 s." in page
    finally:
        assert srv.stop() == 0, srv.log()
    log = srv.log()
    assert "console sign-in: account 'viewer01' locked out for 1 s after 3 failed" in log, log
    assert "console sign-in: client address '127.0.0.4' locked out for 1 s" in log, log
