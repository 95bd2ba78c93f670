"""The web console in a real headless Chromium, against a real ``rocketstore serve --console``.

The broker gets real traffic from our client (keyed JSON orders, binary sensor readings, a
live push-consumer group and a pull-consumer group that committed half of each queue); every
page is then read the way an operator reads it — through the browser — and its numbers are
checked against what the test sent. Screenshots go to the test's directory, and to
``$ROCKETSTORE_SCREENSHOTS`` when set (how ``docs/img`` is refreshed).
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import pytest

pytest.importorskip("starlette")
from rocketstore.client import Producer, PullConsumer, PushConsumer  # noqa: E402

from ..broker.conftest import Server, free_port, start_server  # noqa: E402

ORDERS = 40


@dataclass
class Console:
    srv: Server
    url: str
    shots: str
    per_queue: dict[int, int]  # Orders: messages sent per queue
    committed: dict[int, int]  # offsets the "audit" group committed on Orders
    order_ids: list  # SendResult of each order
    window: tuple[float, float]  # seconds: before the first and after the last order
    traffic: "Traffic"
    pages: list[str] = field(default_factory=list)


class Traffic(threading.Thread):
    """Steady sends to ``Clicks`` (in bursts) and pulls of them, so the TPS chart has
    something to draw."""

    def __init__(self, namesrv: str) -> None:
        super().__init__(daemon=True)
        self.namesrv = namesrv
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        with Producer("clicks-producer", self.namesrv) as p, \
                PullConsumer("clicks-reader", self.namesrv) as c:
            next_offset: dict[int, int] = {}
            while not self.stop_event.wait(0.03 if int(time.time()) % 6 < 3 else 0.08):
                r = p.send("Clicks", b'{"page": "/checkout"}', tags="web")
                self.sent += 1
                q = r.message_queue.queue_id
                if self.sent % 3 == 0:
                    got = c.pull("Clicks", q, next_offset.get(q, 0), 32)
                    next_offset[q] = got.next_begin_offset

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


def shot(page, console: Console, name: str) -> None:
    path = os.path.join(console.shots, f"console-{name}.png")
    page.screenshot(path=path, full_page=True)
    out = os.environ.get("ROCKETSTORE_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        shutil.copy(path, out)


@pytest.fixture(scope="module")
def console(tmp_path_factory, browser):
    base = tmp_path_factory.mktemp("console")
    cport = free_port()
    srv = start_server(str(base / "store"), "--console", str(cport),
                       "--broker-name", "broker-a", "--default-topic-queue-nums", "4")
    consumed = []
    push = None
    traffic = Traffic(srv.namesrv)
    try:
        with Producer("order-service", srv.namesrv) as p:
            t0 = time.time()
            sent = [p.send("Orders", json.dumps({"order": i, "sku": f"SKU-{i % 7}",
                                                 "amount": round(9.5 * i, 2)}).encode(),
                           tags="paid" if i % 3 else "refund", keys=[f"order-{i}"])
                    for i in range(ORDERS)]
            t1 = time.time()
            for i in range(10):
                p.send("Sensors", bytes([0, 1, 2, 255, i]) * 8, tags="temp", keys=[f"s-{i}"])
        per_queue: dict[int, int] = {}
        for r in sent:
            per_queue[r.message_queue.queue_id] = per_queue.get(r.message_queue.queue_id, 0) + 1
        committed = {q: n // 2 for q, n in per_queue.items()}
        with PullConsumer("audit", srv.namesrv) as c:
            for q, off in committed.items():
                c.commit_offset("Orders", q, off)
        push = PushConsumer("billing", srv.namesrv, {"Orders": "*"},
                            lambda m: consumed.append(m.msg_id) or True,
                            consume_from="first", commit_interval_s=0.5)
        push.start()
        deadline = time.monotonic() + 30
        while len(consumed) < ORDERS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(consumed) >= ORDERS, f"billing consumed {len(consumed)} of {ORDERS}"
        traffic.start()
        yield Console(srv, f"http://127.0.0.1:{cport}", str(base), per_queue, committed, sent,
                      (t0 - 1, t1 + 1), traffic)
    finally:
        traffic.stop()
        if push is not None:
            push.shutdown()
        assert srv.stop() == 0, srv.log()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("requestfailed", lambda req: None if req.failure == "net::ERR_ABORTED" else  # left
          errors.append(f"request failed: {req.url} {req.failure}"))
    yield pg
    ctx.close()
    assert not errors, errors


def click_through(page, selector: str) -> None:
    """Click a link or a submit button and wait for the page it leads to."""
    with page.expect_navigation():
        page.click(selector)


def cells(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f"{selector} tbody tr",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))")


def test_overview_shows_the_broker_and_a_live_tps_chart(console, page):
    page.goto(console.url + "/")
    row = cells(page, "#brokers")[0]
    assert row[0] == "broker-a" and row[2] == console.srv.broker and row[3] == "V4_9_7"
    assert console.srv.namesrv in page.inner_text("h1")
    assert int(page.inner_text("#card-topics")) >= 3  # Orders, Sensors, Clicks (+ retry topics)
    assert int(page.inner_text("#card-groups")) == 2  # audit, billing
    # the chart is drawn by uPlot from /api/tps and keeps updating (for the README's picture,
    # a longer run of it)
    points = 45 if os.environ.get("ROCKETSTORE_SCREENSHOTS") else 6
    page.wait_for_function(
        f"() => +document.getElementById('tps-chart').dataset.points >= {points}",
        timeout=30_000 + points * 1500)
    assert page.locator("#tps-chart canvas").count() >= 1
    series = page.evaluate("() => fetch('/api/tps').then(r => r.json())")
    assert max(series["put_tps"]) > 0, series
    assert page.locator("#tps-chart .u-legend").inner_text().count("TPS") >= 2
    assert page.locator("details.runtime-info").count() == 1
    kinds = [r[0] for r in cells(page, "#paths")]
    assert kinds[:3] == ["commitlog", "consumequeue", "index"]
    shot(page, console, "overview")


def test_topics_and_queues(console, page):
    page.goto(console.url + "/topics")
    rows = {r[0].split()[0]: r for r in cells(page, "#topics")}
    assert int(rows["Orders"][3]) == ORDERS
    assert int(rows["Sensors"][3]) == 10
    assert "TBW102" not in rows  # system topics are hidden unless asked for
    assert float(rows["Clicks"][6]) > 0  # live traffic
    shot(page, console, "topics")
    click_through(page, "text=Orders")
    queues = {int(r[1]): (int(r[2]), int(r[3])) for r in cells(page, "#queues")}
    assert {q: hi for q, (lo, hi) in queues.items() if hi} == console.per_queue
    groups = {r[0]: r for r in cells(page, "#topic-groups")}
    expected_audit_lag = sum(n - console.committed[q] for q, n in console.per_queue.items())
    assert int(groups["audit"][2]) == expected_audit_lag
    assert groups["billing"][1] == "online"
    shot(page, console, "topic")


def test_consumer_groups_with_lag(console, page):
    expected_audit_lag = sum(n - console.committed[q] for q, n in console.per_queue.items())
    deadline = time.monotonic() + 20  # the push consumer commits every 0.5 s
    while True:
        page.goto(console.url + "/groups")
        rows = {r[0]: r for r in cells(page, "#groups")}
        if rows["billing"][5] == "0" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rows["billing"][1] == "online" and rows["billing"][2] == "1"
    assert rows["billing"][3] == "CLUSTERING"
    assert rows["billing"][5] == "0"
    assert rows["audit"][1] == "offline"
    assert int(rows["audit"][5]) == expected_audit_lag
    shot(page, console, "groups")
    click_through(page, "text=audit")
    progress = cells(page, "#progress")
    got = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in progress if r[0] == "Orders"}
    for q, n in console.per_queue.items():
        assert got[q] == (n, console.committed[q], n - console.committed[q])
    page.goto(console.url + "/groups/billing")
    assert page.locator("#clients tbody tr").count() == 1
    # the console's port serves the broker's /metrics too: one live client in billing
    from prometheus_client.parser import text_string_to_metric_families
    text = page.request.get(console.url + "/metrics").text()
    conns = {s.labels["consumer_group"]: s.value for f in text_string_to_metric_families(text)
             for s in f.samples if s.name == "rocketmq_consumer_connections"}
    assert conns["billing"] == 1 and conns["audit"] == 0
    shot(page, console, "group")


def test_message_search_by_key_then_detail(console, page):
    page.goto(console.url + "/messages?mode=key")
    page.fill("input[name=topic]", "Orders")
    page.fill("input[name=key]", "order-17")
    click_through(page, "button[type=submit]")
    rows = cells(page, "#results")
    assert len(rows) == 1
    assert rows[0][5] == "order-17" and rows[0][1] == "Orders"
    assert '"order": 17' in rows[0][8]
    shot(page, console, "search-key")
    click_through(page, f"text={rows[0][0]}")
    body = json.loads(page.inner_text("#body"))
    assert body == {"order": 17, "sku": "SKU-3", "amount": 161.5}
    props = {r[0]: r[1] for r in page.eval_on_selector_all(
        "#properties tr", "rs => rs.map(r => [r.cells[0].innerText, r.cells[1].innerText])")}
    assert props["KEYS"] == "order-17" and props["TAGS"] == "paid"
    assert props["UNIQ_KEY"] == console.order_ids[17].msg_id
    body_url = page.get_attribute("#download", "href")
    raw = page.request.get(console.url + body_url)
    assert raw.status == 200 and json.loads(raw.body()) == body
    shot(page, console, "message")


def test_message_search_by_id_and_unique_key(console, page):
    r = console.order_ids[5]
    page.goto(console.url + "/messages?mode=id")
    page.fill("input[name=msg_id]", r.offset_msg_id)
    click_through(page, "button[type=submit]")
    rows = cells(page, "#results")
    assert [row[0] for row in rows] == [r.offset_msg_id]
    # the client's message id (UNIQ_KEY) is found through the index, given the topic
    page.goto(console.url + f"/messages?mode=id&msg_id={r.msg_id}&topic=Orders")
    rows = cells(page, "#results")
    assert [row[0] for row in rows] == [r.offset_msg_id]
    page.goto(console.url + "/messages?mode=id&msg_id=0A0B0C0D00002A9F0000000000000000")
    assert page.inner_text("#result-count") == "0 messages found"


def test_message_search_by_time_window_and_bad_input(console, page):
    begin, end = console.window
    page.goto(console.url + "/messages?mode=time")
    page.fill("input[name=topic]", "Orders")
    page.fill("input[name=begin]", datetime.fromtimestamp(begin).isoformat(timespec="seconds"))
    page.fill("input[name=end]", datetime.fromtimestamp(end + 1).isoformat(timespec="seconds"))
    page.fill("input[name=max]", "500")
    click_through(page, "button[type=submit]")
    rows = cells(page, "#results")
    assert sorted(int(json.loads(row[8])["order"]) for row in rows) == list(range(ORDERS))
    stored = [row[6] for row in rows]
    assert stored == sorted(stored)  # oldest first
    shot(page, console, "search-time")
    # binary bodies are shown as hex
    page.goto(console.url + f"/messages?mode=time&topic=Sensors&begin={int(begin * 1000)}")
    rows = cells(page, "#results")
    assert len(rows) == 10 and rows[0][8].startswith("00 01 02 ff 00")
    # a bad time is a clear message on the page, with status 400, not a server error
    resp = page.goto(console.url + "/messages?mode=time&topic=Orders&begin=yesterday")
    assert resp.status == 400
    assert "begin" in page.inner_text("#search-error")


def test_unknown_pages_are_404_and_the_console_writes_nothing(console, page):
    resp = page.goto(console.url + "/topics/NoSuchTopic")
    assert resp.status == 404 and "does not exist" in page.inner_text("main")
    resp = page.goto(console.url + "/groups/nobody")
    assert resp.status == 404
    # browsing never creates topics: NoSuchTopic is not in the broker's topic table
    topics = page.evaluate("() => fetch('/api/topics').then(r => r.json())")
    assert "NoSuchTopic" not in {t["topic"] for t in topics}
