"""The web console: a Starlette app over ``ops.views``, served by uvicorn in its own thread.

Theory of operation: every page is a server-rendered Jinja2 template over one view function
(overview, topics, one topic, groups, one group, message search, one message); the same data
is served as JSON under ``/api/`` for scripts. The only script in the pages draws the live TPS
chart with uPlot (vendored under ``static/``, nothing loads from elsewhere) from ``/api/tps``,
which reads the broker's ``TpsSampler``. Handlers are plain functions, which Starlette runs on
its worker threads: a slow search never blocks the console's loop, and the console's loop is
not the broker's — ``ConsoleServer`` runs uvicorn on a thread of its own, on a socket bound
before the thread starts (so a busy port is an ``OSError`` at start, not a dead thread).

Nothing here writes: the console reads the store and the broker's state tables only.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from . import views
from .state import OpsState

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_RESULTS = 500


# -- formatting -----------------------------------------------------------------------------------
def fmt_ts(ms: int | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000.0).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_bytes(n: float | None) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_duration(ms: int | float | None) -> str:
    ms = float(ms or 0)
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def parse_time(value: str | None, field: str) -> int | None:
    """``2026-05-01T12:00[:ss]`` (local time), ISO with a zone, or epoch ms → epoch ms."""
    if value is None or not value.strip():
        return None
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise ValueError(f"{field}: {v!r} is not a time (want e.g. 2026-05-01T12:00:00)") from None
    return int(dt.timestamp() * 1000)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        d = {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        for name in ("messages", "lag", "files_bytes", "disk_used_ratio", "topics"):
            if hasattr(type(obj), name) and isinstance(getattr(type(obj), name), property):
                d[name] = getattr(obj, name)
        return d
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# -- the app --------------------------------------------------------------------------------------
class Console:
    """The console's pages and API over one ``OpsState``."""

    def __init__(self, state: OpsState, registry: Any = None) -> None:
        self.state = state
        self.templates = Jinja2Templates(directory=os.path.join(HERE, "templates"))
        env = self.templates.env
        env.filters.update(ts=fmt_ts, bytes=fmt_bytes, duration=fmt_duration)
        env.globals.update(state=state, now_ms=views.now_ms)
        routes = [Route("/", self.overview), Route("/topics", self.topics),
                  Route("/topics/{topic:path}", self.topic), Route("/groups", self.groups),
                  Route("/groups/{group:path}", self.group), Route("/messages", self.messages),
                  Route("/message/{msg_id}", self.message),
                  Route("/api/overview", self.api_overview), Route("/api/topics", self.api_topics),
                  Route("/api/groups", self.api_groups), Route("/api/messages", self.api_messages),
                  Route("/api/tps", self.api_tps),
                  Mount("/static", StaticFiles(directory=os.path.join(HERE, "static")),
                        name="static")]
        if registry is not None:
            from prometheus_client import make_asgi_app
            routes.append(Mount("/metrics", make_asgi_app(registry)))
        self.app = Starlette(routes=routes)

    def _store(self) -> Any:
        store = self.state.store()
        if store is None:
            raise RuntimeError("the store is not open (the broker is starting or stopping)")
        return store

    def _page(self, request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
        ctx.setdefault("active", name.split(".")[0])
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    # -- data -----------------------------------------------------------------------------------
    def overview_data(self) -> dict:
        st, store = self.state, self._store()
        rt = views.store_runtime(store, st.store_config)
        tvs = views.topic_views(store, st.topics, st.broker_name)
        groups = views.group_names(st.offsets, st.consumers, st.subgroups)
        tps = st.tps.series() if st.tps is not None else None
        last = {k: (v[-1] if v else 0.0) for k, v in tps.items()} if tps else {}
        info = None
        if st.broker_config is not None:
            from ..broker.admin_views import runtime_info
            info = runtime_info(store, st.store_config, st.broker_config, st.broker_stats)
        return {"cluster": st.cluster_name, "broker": st.broker_name, "broker_id": 0,
                "addr": st.broker_addr, "namesrv": st.namesrv_addr,
                "store": st.store_config.store_path_root_dir, "read_only": st.read_only,
                "started_ms": st.started_ms, "uptime_ms": views.now_ms() - st.started_ms,
                "runtime": rt, "topics": sum(1 for t in tvs if not t.system),
                "system_topics": sum(1 for t in tvs if t.system),
                "messages": sum(t.messages for t in tvs if not t.system), "groups": len(groups),
                "connections": st.connections(),
                "totals": st.tps.totals() if st.tps is not None else None,
                "put_tps": last.get("put_tps", 0.0), "get_tps": last.get("get_tps", 0.0),
                "runtime_info": info}

    def search(self, params: Any) -> tuple[str, dict, list[views.MessageView]]:
        """Run the search the query string asks for: (mode, form values, results)."""
        mode = params.get("mode") or "key"
        form = {k: (params.get(k) or "").strip()
                for k in ("topic", "key", "msg_id", "begin", "end", "offset", "max")}
        max_num = int(form["max"]) if form["max"].isdigit() else 64
        max_num = max(1, min(max_num, MAX_RESULTS))
        store = self._store()
        begin = parse_time(form["begin"], "begin")
        end = parse_time(form["end"], "end")
        if mode == "key":
            if not (form["topic"] and form["key"]):
                return mode, form, []
            found = views.find_by_key(store, form["topic"], form["key"], max_num, begin or 0, end)
        elif mode == "id":
            if not form["msg_id"]:
                return mode, form, []
            found = views.find_by_id(store, form["msg_id"], form["topic"] or None)
        elif mode == "time":
            if not form["topic"]:
                return mode, form, []
            if begin is None:
                raise ValueError("begin: give the start of the time window")
            end = end if end is not None else views.now_ms()
            if end < begin:
                raise ValueError("end: the window ends before it begins")
            found = views.find_by_time(store, form["topic"], begin, end, max_num)
        elif mode == "offset":
            if not form["offset"]:
                return mode, form, []
            if not form["offset"].isdigit():
                raise ValueError(f"offset: {form['offset']!r} is not a CommitLog offset")
            found = views.find_by_offset(store, int(form["offset"]))
        else:
            raise ValueError(f"mode: unknown search {mode!r} (key, id, time or offset)")
        return mode, form, found

    # -- pages ----------------------------------------------------------------------------------
    def overview(self, request: Request) -> Response:
        return self._page(request, "overview.html", o=self.overview_data())

    def topics(self, request: Request) -> Response:
        show_system = request.query_params.get("system") == "1"
        tvs = views.topic_views(self._store(), self.state.topics, self.state.broker_name)
        shown = [t for t in tvs if show_system or not t.system]
        return self._page(request, "topics.html", topics=shown, show_system=show_system,
                          hidden=len(tvs) - len(shown))

    def topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        store = self._store()
        if name not in views.topic_names(store, self.state.topics):
            return self._page(request, "error.html", 404, active="topics",
                              message=f"topic {name!r} does not exist")
        tv = views.topic_view(store, self.state.topics, name, self.state.broker_name)
        gvs = [g for g in self._group_views(store) if name in g.topics]
        return self._page(request, "topic.html", active="topics", t=tv, groups=gvs)

    def _group_views(self, store: Any) -> list[views.GroupView]:
        st = self.state
        return views.group_views(store, st.topics, st.offsets, st.consumers, st.subgroups,
                                 broker_name=st.broker_name, stats=st.broker_stats)

    def groups(self, request: Request) -> Response:
        gvs = self._group_views(self._store())
        return self._page(request, "groups.html", groups=gvs)

    def group(self, request: Request) -> Response:
        name = request.path_params["group"]
        st = self.state
        if name not in views.group_names(st.offsets, st.consumers, st.subgroups):
            return self._page(request, "error.html", 404, active="groups",
                              message=f"consumer group {name!r} is not known to this broker")
        g = views.group_view(self._store(), st.topics, st.offsets, st.consumers, name,
                             broker_name=st.broker_name, stats=st.broker_stats)
        return self._page(request, "group.html", active="groups", g=g)

    def messages(self, request: Request) -> Response:
        topics = [t for t in views.topic_names(self._store(), self.state.topics)]
        try:
            mode, form, found = self.search(request.query_params)
        except ValueError as exc:
            mode = request.query_params.get("mode") or "key"
            form = dict(request.query_params)
            return self._page(request, "messages.html", 400, mode=mode, form=form, results=None,
                              error=str(exc), topics=topics)
        searched = any(form.get(k) for k in ("topic", "key", "msg_id", "offset"))
        return self._page(request, "messages.html", mode=mode, form=form,
                          results=found if searched else None, error=None, topics=topics)

    def message(self, request: Request) -> Response:
        msg_id = request.path_params["msg_id"]
        found = views.find_by_id(self._store(), msg_id)
        if not found:
            return self._page(request, "error.html", 404, active="messages",
                              message=f"no message with id {msg_id!r}")
        return self._page(request, "message.html", active="messages", m=found[0])

    # -- JSON -----------------------------------------------------------------------------------
    def api_overview(self, request: Request) -> Response:
        return JSONResponse(_plain(self.overview_data()))

    def api_topics(self, request: Request) -> Response:
        return JSONResponse(_plain(views.topic_views(self._store(), self.state.topics,
                                                     self.state.broker_name)))

    def api_groups(self, request: Request) -> Response:
        return JSONResponse(_plain(self._group_views(self._store())))

    def api_messages(self, request: Request) -> Response:
        try:
            _, _, found = self.search(request.query_params)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(_plain(found))

    def api_tps(self, request: Request) -> Response:
        if self.state.tps is None:
            return JSONResponse({"available": False})
        try:
            since = float(request.query_params.get("since") or 0)
        except ValueError:
            since = 0.0
        return JSONResponse({"available": True, **self.state.tps.series(since)})


class ConsoleServer:
    """uvicorn serving a ``Console`` on its own thread and event loop."""

    def __init__(self, state: OpsState, host: str, port: int, *, registry: Any = None) -> None:
        self.console = Console(state, registry)
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.console.app, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="ConsoleServer", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"the console did not start on {self.host}:{self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def wait(self) -> None:
        """Block until the server stops (``rocketstore console``)."""
        if self._thread is not None:
            self._thread.join()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"
