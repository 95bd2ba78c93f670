"""The web console: a Starlette app over ``ops.sources``, served by uvicorn in its own thread.

Theory of operation: every page is a server-rendered Jinja2 template over what one call to the
console's *source* returns (``ops.sources``: overview, topics, one topic, groups, one group,
message search, one message); the same data is served as JSON under ``/api/`` for scripts.
The only script in the pages draws the live TPS chart with uPlot (vendored under ``static/``,
nothing loads from elsewhere) from ``/api/tps``, which the source samples once a second.
Handlers are plain functions, which Starlette runs on its worker threads: a slow search never
blocks the console's loop, and the console's loop is not the broker's — ``ConsoleServer`` runs
uvicorn on a thread of its own, on a socket bound before the thread starts (so a busy port is
an ``OSError`` at start, not a dead thread).

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
KEY_QUERY_CAP = 64  # StoreConfig.max_msgs_num_batch's default: one index query's most


def _client(request: Request) -> str | None:
    """The client address a sign-in is counted against."""
    return request.client.host if request.client is not None else None


class Console:
    """The console's pages and API over one source (``ops.sources``)."""

    def __init__(self, source: Any, registry: Any = None, auth: Any = None) -> None:
        self.source = source
        self.auth = auth  # console_auth.ConsoleAuth when the broker's ACL is on
        self.templates = Jinja2Templates(directory=os.path.join(HERE, "templates"))
        env = self.templates.env
        env.filters.update(ts=fmt_ts, bytes=fmt_bytes, duration=fmt_duration)
        env.globals.update(source=source, now_ms=views.now_ms)
        routes = [Route("/", self.overview), Route("/topics", self.topics),
                  Route("/topics/{topic:path}", self.topic), Route("/groups", self.groups),
                  Route("/groups/{group:path}", self.group), Route("/messages", self.messages),
                  Route("/message/{msg_id}", self.message),
                  Route("/message/{msg_id}/body", self.message_body),
                  Route("/api/overview", self.api_overview), Route("/api/topics", self.api_topics),
                  Route("/api/groups", self.api_groups), Route("/api/messages", self.api_messages),
                  Route("/api/tps", self.api_tps), Route("/tier", self.tier),
                  Route("/api/tier", self.api_tier),
                  Mount("/static", StaticFiles(directory=os.path.join(HERE, "static")),
                        name="static")]
        if auth is not None:  # every page and API behind a sign-in (console_auth)
            routes = [Route(r.path, self._guarded(r.endpoint)) if isinstance(r, Route) else r
                      for r in routes]
            routes += [Route("/login", self.login, methods=["GET", "POST"]),
                       Route("/logout", self.logout)]
        elif registry is not None:  # with ACL on, /metrics is the metrics port's alone
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, make_asgi_app

            def metrics(request: Request) -> Response:  # /metrics itself: no redirect to /metrics/
                return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
            routes.append(Route("/metrics", metrics))
            routes.append(Mount("/metrics", make_asgi_app(registry)))
        self.app = Starlette(routes=routes)

    # -- who is asking (ACL on) -------------------------------------------------------------------
    def _src(self, request: Request) -> Any:
        account = getattr(request.state, "account", None)
        if account is None:
            return self.source
        from .console_auth import AclSource
        return AclSource(self.source, account)

    def _guarded(self, endpoint: Any) -> Any:
        from starlette.responses import PlainTextResponse, RedirectResponse

        from .console_auth import REALM

        def guarded(request: Request) -> Response:
            from .console_auth import Throttled
            try:
                account = self.auth.who(request.cookies, request.headers.get("authorization"),
                                        _client(request))
            except Throttled as exc:
                return PlainTextResponse(f"{exc}\n", 429, headers={
                    "Retry-After": str(max(1, round(exc.retry_after_s)))})
            if account is None:
                path = request.url.path
                if path.startswith("/api/") or path.endswith("/body") or \
                        request.headers.get("authorization"):
                    return PlainTextResponse("sign in: HTTP Basic with an account of the "
                                             "broker's plain_acl.yml\n", 401,
                                             headers={"WWW-Authenticate": REALM})
                from urllib.parse import quote
                target = path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='')}", 303)
            request.state.account = account
            return endpoint(request)
        return guarded

    async def login(self, request: Request) -> Response:
        from urllib.parse import parse_qs

        from starlette.responses import RedirectResponse

        from .console_auth import SESSION_COOKIE

        nxt = request.query_params.get("next") or "/"
        if not nxt.startswith("/") or nxt.startswith("//") or "\\" in nxt:
            nxt = "/"  # only pages of this console
        error = None
        status = 200
        if request.method == "POST":
            form = parse_qs((await request.body()).decode("utf-8", "replace"))
            ak = (form.get("access_key") or [""])[0]
            from .console_auth import Throttled
            try:
                token = self.auth.login(ak, (form.get("secret_key") or [""])[0],
                                        _client(request))
            except Throttled as exc:
                wait = str(max(1, round(exc.retry_after_s)))
                resp = self._page(request, "login.html", 429, active="login",
                                  error=f"Too many failed sign-ins: try again in {wait} s.",
                                  next=nxt)
                resp.headers["Retry-After"] = wait
                return resp
            if token is not None:
                resp = RedirectResponse(nxt, 303)
                resp.set_cookie(SESSION_COOKIE, token, max_age=int(self.auth.ttl_s), path="/",
                                httponly=True, samesite="strict")
                return resp
            error, status = "Unknown access key or wrong secret key.", 401
        return self._page(request, "login.html", status, active="login", error=error, next=nxt)

    def logout(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        from .console_auth import SESSION_COOKIE

        self.auth.logout(request.cookies.get(SESSION_COOKIE))
        resp = RedirectResponse("/login", 303)
        resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return resp

    def _page(self, request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
        ctx.setdefault("active", name.split(".")[0])
        account = getattr(request.state, "account", None)
        ctx.setdefault("account", account.access_key if account is not None else None)
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    def search(self, params: Any, src: Any = None) -> tuple[str, dict, list[views.MessageView]]:
        """Run the search the query string asks for: (mode, form values, results)."""
        mode = params.get("mode") or "key"
        form = {k: (params.get(k) or "").strip()
                for k in ("topic", "key", "msg_id", "begin", "end", "offset", "max")}
        max_num = int(form["max"]) if form["max"].isdigit() else 64
        max_num = max(1, min(max_num, MAX_RESULTS))
        src = src if src is not None else self.source
        begin = parse_time(form["begin"], "begin")
        end = parse_time(form["end"], "end")
        if mode == "key":
            if not (form["topic"] and form["key"]):
                return mode, form, []
            found = src.find_by_key(form["topic"], form["key"], max_num, begin or 0, end)
        elif mode == "id":
            if not form["msg_id"]:
                return mode, form, []
            found = src.find_by_id(form["msg_id"], form["topic"] or None)
        elif mode == "time":
            if not form["topic"]:
                return mode, form, []
            if begin is None:
                raise ValueError("begin: give the start of the time window")
            end = end if end is not None else views.now_ms()
            if end < begin:
                raise ValueError("end: the window ends before it begins")
            found = src.find_by_time(form["topic"], begin, end, max_num)
        elif mode == "offset":
            if not form["offset"]:
                return mode, form, []
            if not form["offset"].isdigit():
                raise ValueError(f"offset: {form['offset']!r} is not a CommitLog offset")
            found = src.find_by_offset(int(form["offset"]))
        else:
            raise ValueError(f"mode: unknown search {mode!r} (key, id, time or offset)")
        return mode, form, found

    # -- pages ----------------------------------------------------------------------------------
    def overview(self, request: Request) -> Response:
        return self._page(request, "overview.html", o=self._src(request).overview())

    def topics(self, request: Request) -> Response:
        show_system = request.query_params.get("system") == "1"
        tvs = self._src(request).topics()
        shown = [t for t in tvs if show_system or not t.system]
        return self._page(request, "topics.html", topics=shown, show_system=show_system,
                          hidden=len(tvs) - len(shown))

    def topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        tv = self._src(request).topic(name)
        if tv is None:
            return self._page(request, "error.html", 404, active="topics",
                              message=f"topic {name!r} does not exist")
        gvs = [g for g in self._src(request).groups() if name in g.topics]
        return self._page(request, "topic.html", active="topics", t=tv, groups=gvs)

    def tier(self, request: Request) -> Response:
        return self._page(request, "tier.html", active="tier", t=self._src(request).tier())

    def groups(self, request: Request) -> Response:
        show_system = request.query_params.get("system") == "1"
        gvs = self._src(request).groups()
        shown = [g for g in gvs if show_system or not g.system]
        return self._page(request, "groups.html", groups=shown, show_system=show_system,
                          hidden=len(gvs) - len(shown))

    def group(self, request: Request) -> Response:
        name = request.path_params["group"]
        g = self._src(request).group(name)
        if g is None:
            return self._page(request, "error.html", 404, active="groups",
                              message=f"consumer group {name!r} is not known to this broker")
        return self._page(request, "group.html", active="groups", g=g)

    def messages(self, request: Request) -> Response:
        topics = self._src(request).topic_names()
        try:
            mode, form, found = self.search(request.query_params, self._src(request))
        except ValueError as exc:
            from .console_auth import Refused
            mode = request.query_params.get("mode") or "key"
            form = dict(request.query_params)
            return self._page(request, "messages.html", 403 if isinstance(exc, Refused) else 400,
                              mode=mode, form=form, results=None,
                              error=str(exc), topics=topics)
        searched = any(form.get(k) for k in ("topic", "key", "msg_id", "offset"))
        limit = max(1, min(int(form["max"]) if form["max"].isdigit() else 64, MAX_RESULTS))
        # a search stops at its limit: say so rather than call the first page "found"
        # (a key query also stops at the store's max_msgs_num_batch, 64 by default)
        cap = min(limit, KEY_QUERY_CAP) if mode == "key" else limit
        limited = mode in ("key", "time") and len(found) >= cap
        limit = cap
        return self._page(request, "messages.html", mode=mode, form=form,
                          results=found if searched else None, error=None, topics=topics,
                          limit=limit, limited=limited)

    def message(self, request: Request) -> Response:
        msg_id = request.path_params["msg_id"]
        found = self._src(request).find_by_id(msg_id, None)
        if not found:
            return self._page(request, "error.html", 404, active="messages",
                              message=f"no message with id {msg_id!r}")
        return self._page(request, "message.html", active="messages", m=found[0])

    def message_body(self, request: Request) -> Response:
        msg_id = request.path_params["msg_id"]
        body = self._src(request).body(msg_id)
        if body is None:
            return Response(f"no message with id {msg_id!r}\n", 404, media_type="text/plain")
        return Response(body, media_type="application/octet-stream", headers={
            "Content-Disposition": f'attachment; filename="{msg_id}.bin"'})

    # -- JSON -----------------------------------------------------------------------------------
    def api_overview(self, request: Request) -> Response:
        return JSONResponse(_plain(self._src(request).overview()))

    def api_topics(self, request: Request) -> Response:
        return JSONResponse(_plain(self._src(request).topics()))

    def api_groups(self, request: Request) -> Response:
        return JSONResponse(_plain(self._src(request).groups()))

    def api_messages(self, request: Request) -> Response:
        from .console_auth import Refused
        try:
            _, _, found = self.search(request.query_params, self._src(request))
        except Refused as exc:  # no SUB on the topic: forbidden, not a malformed request
            return JSONResponse({"error": str(exc)}, status_code=403)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(_plain(found))

    def api_tier(self, request: Request) -> Response:
        t = self._src(request).tier()
        return JSONResponse({"available": False} if t is None else {"available": True, **t})

    def api_tps(self, request: Request) -> Response:
        try:
            since = float(request.query_params.get("since") or 0)
        except ValueError:
            since = 0.0
        series = self._src(request).tps(since)
        if series is None:
            return JSONResponse({"available": False})
        return JSONResponse({"available": True, **series})


class ConsoleServer:
    """uvicorn serving a ``Console`` on its own thread and event loop."""

    def __init__(self, source: Any, host: str, port: int, *, registry: Any = None,
                 limits: Any = None, allowed_hosts: Any = None, acl: Any = None) -> None:
        from ..netlimits import ConnectionLimiter, Limits
        from .httpguard import allowed_hosts as default_hosts

        auth = None
        if acl is not None:  # the broker's ACL is on: sign-in, per-account views
            from .console_auth import ConsoleAuth
            auth = ConsoleAuth(acl)
        self.console = Console(source, registry, auth)
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self.limiter = ConnectionLimiter(self.limits, "console")
        self.allowed = allowed_hosts or default_hosts(host)
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
        from uvicorn.protocols.http.h11_impl import H11Protocol

        from .httpguard import HostCheck, limited_protocol

        config = uvicorn.Config(HostCheck(self.console.app, self.allowed), log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=2,
                                http=limited_protocol(H11Protocol, self.limiter, self.limits))
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
