"""Helpers of the serve tests: an ``avatar-app serve`` process on free loopback ports, and a TCP relay.

Import with ``from serve_fixtures import ...``. Everything listens on 127.0.0.1 only.
"""
from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Start-up of the server (engines, tritonserver, three Python-backend stubs) on a loaded 2-core machine.
START_TIMEOUT_S = 300

needs_pytriton = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
    reason="nvidia-pytriton ships tritonserver for Linux x86-64 only")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (free when asked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class ServeProcess:
    """``python -m avatar_app serve`` in a child process, with its output collected.

    Args:
        cache_dir: its AVATAR_APP_CACHE_DIR (engine cache, session file, workspace).
        ports: (grpc, http, metrics); default: free ones.
        args: more command-line arguments.
        own_group: start it as the leader of a process group of its own (for :meth:`stop_group`).
    """

    def __init__(self, cache_dir: Path, ports: list[int] | None = None, args: tuple[str, ...] = (),
                 own_group: bool = False):
        self.own_group = own_group
        self.cache_dir = Path(cache_dir)
        self.grpc_port, self.http_port, self.metrics_port = ports or free_ports(3)
        self.args = list(args)
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._ready: threading.Event | None = None  # set by the reader at "ready" (launch)
        self._launched = 0.0  # time.monotonic() at launch

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    def http(self, path: str, port: int | None = None) -> tuple[int, str]:
        """(status, body) of a GET on the server's HTTP (or another) port."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port or self.http_port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def start(self) -> ServeProcess:
        """Start the server and wait until it says ``ready`` (:meth:`launch`, then :meth:`wait_ready`)."""
        return self.launch().wait_ready()

    def launch(self) -> ServeProcess:
        """Start the server without waiting: the caller does other work during its start-up and
        then calls :meth:`wait_ready` before using it."""
        env = dict(os.environ, AVATAR_APP_CACHE_DIR=str(self.cache_dir), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "avatar_app", "serve", "--grpc-port", str(self.grpc_port),
               "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port), *self.args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, process_group=0 if self.own_group else None)
        ready = threading.Event()

        def read(stream, sink):
            for line in stream:
                sink.append(line.rstrip("\n"))
                if line.startswith("ready"):
                    ready.set()

        for stream, sink in ((self.proc.stdout, self.lines), (self.proc.stderr, self.errors)):
            threading.Thread(target=read, args=(stream, sink), daemon=True).start()
        self._ready = ready
        self._launched = time.monotonic()
        return self

    def wait_ready(self) -> ServeProcess:
        """Wait until the launched server says ``ready``.

        Raises:
            AssertionError: it exited, or was not ready :data:`START_TIMEOUT_S` after :meth:`launch`
                (then killed), with its output.
        """
        ready = self._ready
        deadline = self._launched + START_TIMEOUT_S
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise AssertionError(f"serve did not start (status {self.proc.returncode}):\n"
                                     + "\n".join(self.lines + self.errors))
        return self

    def tree(self):
        """psutil processes of the server and all its descendants."""
        import psutil

        p = psutil.Process(self.proc.pid)
        return [p] + p.children(recursive=True)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int | None:
        """Send ``sig`` and wait for the exit status (None if it did not exit in time, then killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None


    def stop_group(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int | None:
        """Send ``sig`` to the server's whole process group (as ``timeout`` or a service manager does;
        needs ``own_group``) and wait for the exit status (None if it did not exit in time, then killed)."""
        assert self.own_group and self.proc is not None
        os.killpg(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target that can be cut and restored (a network outage).

    ``cut()`` stops listening and closes every relayed connection; ``restore()`` listens again on the
    same port; while :attr:`stalled` is set, bytes are held back (a server that stops answering).
    Bounded: it serves only while the test runs and stops with :meth:`close`.
    """

    def __init__(self, target_port: int):
        self.target = target_port
        self.port = free_ports(1)[0]
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._stop = threading.Event()
        self.stalled = threading.Event()
        self.restore()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def restore(self) -> None:
        with self._lock:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self.port))
            s.listen(16)
            s.setblocking(False)
            self._listener = s
            self._sel.register(s, selectors.EVENT_READ, "accept")

    def cut(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._sel.unregister(self._listener)
                self._listener.close()
                self._listener = None
            for a in list(self._pairs):
                self._drop(a)

    def _drop(self, s: socket.socket) -> None:
        other = self._pairs.pop(s, None)
        for x in (s, other):
            if x is None:
                continue
            self._pairs.pop(x, None)
            try:
                self._sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.stalled.is_set():
                time.sleep(0.02)
                continue
            for key, _ in self._sel.select(0.05):
                with self._lock:
                    s = key.fileobj
                    if key.data == "accept":
                        if s is not self._listener:
                            continue
                        client, _ = s.accept()
                        upstream = socket.create_connection(("127.0.0.1", self.target))
                        for x in (client, upstream):
                            x.setblocking(False)
                            self._sel.register(x, selectors.EVENT_READ, "data")
                        self._pairs[client], self._pairs[upstream] = upstream, client
                        continue
                    if s not in self._pairs:
                        continue
                    try:
                        data = s.recv(1 << 16)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(s)
                        continue
                    try:
                        self._pairs[s].setblocking(True)
                        self._pairs[s].sendall(data)
                        self._pairs[s].setblocking(False)
                    except OSError:
                        self._drop(s)

    def close(self) -> None:
        self.cut()
        self._stop.set()
        self._thread.join(5)
