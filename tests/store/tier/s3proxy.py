"""A TCP proxy on 127.0.0.1 in front of the S3 server that a test steers: ``pass`` forwards,
``refuse`` closes each connection at once, ``error`` answers every request with HTTP 503
(SlowDown), ``stall`` holds connections without answering, ``lose_put`` forwards PUTs but
closes the connection instead of relaying their answer (the object changed, the client does
not know), ``lose_later_put`` the same for every PUT but the first (an upload half done: the
COMMIT_LOG written, the CONSUME_QUEUE's answer lost). ``requests`` logs each request line seen, for the test to check."""
from __future__ import annotations

import socket
import threading

_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ")
SLOW_DOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: 92\r\n"
             b"Connection: close\r\n\r\n<Error><Code>SlowDown</Code><Message>Please reduce your "
             b"request rate.</Message></Error>")


class S3Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode = "pass"
        self.requests: list[str] = []
        self.lost_puts = 0
        self._puts = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._open: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, mode: str) -> None:
        self.mode = mode
        self._puts = 0
        for s in list(self._open):  # a new mode starts on fresh connections
            _close(s)
        self._open.clear()

    def close(self) -> None:
        self._stop = True
        _close(self._sock)
        self.set("pass")

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            self._open.append(c)
            threading.Thread(target=self._serve, args=(c, self.mode), daemon=True).start()

    def _serve(self, c: socket.socket, mode: str) -> None:
        if mode == "refuse":
            _close(c)
            return
        if mode == "stall":
            try:
                while c.recv(65536):
                    pass
            except OSError:
                pass
            _close(c)
            return
        if mode == "error":
            try:
                data = c.recv(65536)
                if data:
                    self._log(data)
                    c.sendall(SLOW_DOWN)
            except OSError:
                pass
            _close(c)
            return
        try:
            u = socket.create_connection(self.upstream)
        except OSError:
            _close(c)
            return
        self._open.append(u)
        lose = threading.Event()

        def up():
            try:
                while True:
                    data = c.recv(65536)
                    if not data:
                        break
                    self._log(data)
                    if mode.startswith("lose_") and data.startswith(b"PUT "):
                        self._puts += 1
                        if mode == "lose_put" or self._puts > 1:
                            lose.set()
                    u.sendall(data)
            except OSError:
                pass
            _close(u)

        threading.Thread(target=up, daemon=True).start()
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                if lose.is_set():  # the PUT is done upstream; its answer never arrives
                    self.lost_puts += 1
                    break
                c.sendall(data)
        except OSError:
            pass
        _close(c)
        _close(u)

    def _log(self, data: bytes) -> None:
        if data.startswith(_METHODS):
            self.requests.append(data.split(b"\r\n", 1)[0].decode("latin-1"))


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
