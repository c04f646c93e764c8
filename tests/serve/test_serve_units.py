"""Serve pieces without a server: URLs, the stub's libpython, engine choices, batching, ports, signals."""
from __future__ import annotations

import argparse
import ctypes
import io
import os
import signal
import socket
import sys
import threading
from typing import ClassVar

import numpy as np
import pytest

from avatar_app.core.errors import BackendUnavailableError, InputError
from avatar_app.inference.backends import candidate_plan, get_backend
from avatar_app.inference.base import Precision, TensorSpec
from avatar_app.inference.modelinfo import ModelInfo, ProfileRange
from avatar_app.inference.remote import RemoteRunner, format_url, is_loopback, parse_url, remote_url, set_remote_url
from avatar_app.serve.engines import EngineChoice, batch_limit, parse_engine_choice, triton_dims


def test_parse_url_forms_and_errors():
    assert parse_url("grpc://10.0.0.5:9001") == ("10.0.0.5", 9001)
    assert parse_url("gaming-pc") == ("gaming-pc", 8001)
    assert parse_url("GRPC://[::1]:8101/") == ("::1", 8101)
    assert parse_url("::1") == ("::1", 8001)
    assert format_url("::1", 8001) == "grpc://[::1]:8001"
    for bad in ("http://host:8000", "grpc://:8001", "grpc://host:0", "grpc://host:http"):
        with pytest.raises(InputError):
            parse_url(bad)


def test_loopback_addresses():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.20", "gaming-pc"))


def test_the_stub_environment_puts_this_interpreters_libpython_first(monkeypatch):
    """The library found first is the running interpreter itself (same version string)."""
    from avatar_app.serve.environment import interpreter_lib_dir, libpython_name, stub_environment

    lib = interpreter_lib_dir()
    if lib is None:
        pytest.skip("this Python has no shared libpython (built without --enable-shared)")
    env = stub_environment({"LD_LIBRARY_PATH": f"/somewhere/else:{lib}"})
    parts = env["LD_LIBRARY_PATH"].split(":")
    assert parts == [str(lib), "/somewhere/else"]  # first, and not twice
    assert stub_environment({})["LD_LIBRARY_PATH"] == str(lib)
    so = ctypes.CDLL(str(lib / libpython_name()))
    so.Py_GetVersion.restype = ctypes.c_char_p
    assert so.Py_GetVersion().decode().split()[0] == sys.version.split()[0]


def test_engine_choice_parsing():
    assert parse_engine_choice("face_recon=ort_cpu/int8") == ("face_recon", EngineChoice("ort_cpu", "int8"))
    assert parse_engine_choice("speech2face=FP16") == ("speech2face", EngineChoice(None, "fp16"))
    assert parse_engine_choice("x=tensorrt") == ("x", EngineChoice("tensorrt", None))
    for bad in ("face_recon", "=ort_cpu", "face_recon=ort_cpu/int4"):
        with pytest.raises(InputError):
            parse_engine_choice(bad)


def _info(inputs, outputs, dyn=None):
    return ModelInfo(path=__import__("pathlib").Path("m.onnx"), sha256="0", inputs=tuple(inputs),
                     outputs=tuple(outputs), dynamic_dims=dyn or {})


def test_batch_limit_and_triton_dims():
    f32 = np.dtype(np.float32)
    x = TensorSpec("x", f32, (None, None, 64), ("B", "T", None))
    y = TensorSpec("y", f32, (None, None, 52), ("B", "T", None))
    assert batch_limit(_info([x], [y], {"B": ProfileRange(1, 1, 16)})) == 16
    assert batch_limit(_info([x], [y])) == 64  # no range in the card
    fixed = TensorSpec("img", f32, (1, 128, 128, 3), (None,) * 4)
    assert batch_limit(_info([fixed], [y])) == 0  # a fixed first axis: no batching
    assert triton_dims(x, batched=True) == (-1, 64)
    assert triton_dims(fixed, batched=False) == (1, 128, 128, 3)


def test_remote_backend_is_chosen_only_explicitly(monkeypatch):
    monkeypatch.delenv("AVATAR_APP_REMOTE", raising=False)
    assert all(b != "remote" for b, _ in candidate_plan())
    assert candidate_plan("remote")[0][0] == "remote" and candidate_plan("remote")[-1][0] == "ort_cpu"
    st = get_backend("remote").status()
    assert not st.can_run and "--remote grpc://HOST:PORT" in st.reason
    set_remote_url("grpc://127.0.0.1:1")  # nothing listens on port 1
    try:
        assert remote_url() == "grpc://127.0.0.1:1"
        st = get_backend("remote").status()
        assert st.can_run and "run locally until it answers" in st.reason
    finally:
        set_remote_url(None)
    monkeypatch.setenv("AVATAR_APP_REMOTE", "grpc://10.1.2.3:8001")
    assert remote_url() == "grpc://10.1.2.3:8001"


def test_remote_runner_without_a_server_runs_locally_and_says_so(tmp_path):
    """Port 1 on loopback refuses at once: the runner opens on its local engine and keeps retrying."""
    from avatar_app.inference.ort import OrtRunner
    from avatar_app.inference.tiny_models import write_all

    path = next(iter(write_all(tmp_path).values()))
    info = ModelInfo.from_onnx(path)
    seen = []
    with RemoteRunner("grpc://127.0.0.1:1", info, OrtRunner.from_path(path), retry_s=0.05,
                      on_switch=seen.append) as r:
        assert not r.is_remote and [e.to for e in r.events] == ["local"]
        assert seen == r.events and "cannot be used" in r.events[0].reason
        feeds = info.example_feeds(batch=1)
        out = r.infer(feeds)
        assert r.local_calls == 1 and r.remote_calls == 0 and set(out) == {s.name for s in info.outputs}
        assert "local" in r.describe() and "not answering" in r.describe()
    assert not r._thread.is_alive()  # close stops the reconnection thread


def test_open_engine_on_remote_without_url_falls_back_with_the_reason(monkeypatch, tmp_path):
    from avatar_app.inference.cache import EngineCache
    from avatar_app.inference.manager import EngineManager
    from avatar_app.inference.tiny_models import write_all

    monkeypatch.delenv("AVATAR_APP_REMOTE", raising=False)
    path = next(iter(write_all(tmp_path / "m").values()))
    res = EngineManager(cache=EngineCache(tmp_path / "c"), isolate=False).open_engine(path, "remote")
    assert res.runner.backend == "ort_cpu"
    assert res.attempts[0].backend == "remote" and not res.attempts[0].ok
    res.runner.close()


def test_busy_port_is_one_clear_error():
    from avatar_app.serve.server import check_port_free

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(InputError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free("127.0.0.1", port)


def test_serve_without_pytriton_says_how_to_install(monkeypatch):
    import builtins

    from avatar_app.serve.server import EngineServer, ServeOptions

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("pytriton"):
            raise ImportError("No module named 'pytriton'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(BackendUnavailableError, match=r"avatar-app\[serve\]"):
        EngineServer(ServeOptions()).start()


class _FakeServer:
    """Stands in for EngineServer: no Triton, records the calls."""

    instances: ClassVar[list] = []

    def __init__(self, options):
        self.options, self.engines, self.failed, self.calls = options, [], {}, []
        self.log_path = "triton.log"
        _FakeServer.instances.append(self)

    start_s = 0.0

    def start(self, progress=None):
        self.calls.append("start")
        threading.Event().wait(self.start_s)  # a signal may arrive here
        self.start_finished = True  # not reached when the signal stopped the start-up

    def wait(self, stop, poll_s=0.5):
        self.calls.append("wait")
        return stop.wait(30)

    def stop(self):
        self.calls.append("stop")

    def kill(self):
        self.calls.append("kill")


def _serve_args(**kw):
    ns = {"host": "127.0.0.1", "grpc_port": 8001, "http_port": 8000, "metrics_port": 8002, "backend": None,
          "precision": None, "engine": [], "max_queue_delay_us": 1000, "instances": 1}
    ns.update(kw)
    return argparse.Namespace(**ns)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_serve_cleanly(monkeypatch, sig):
    from avatar_app.serve import cli, server

    monkeypatch.setattr(server, "EngineServer", _FakeServer)
    _FakeServer.instances.clear()
    before = signal.getsignal(sig)
    threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
    out = io.StringIO()
    assert cli.run_serve(_serve_args(), out) == 0
    fake = _FakeServer.instances[0]
    assert fake.calls == ["start", "wait", "stop"]
    assert "ready; Ctrl+C stops" in out.getvalue() and "stopping" in out.getvalue()
    assert "no authentication" not in out.getvalue()
    assert signal.getsignal(sig) == before  # handlers restored


def test_a_signal_during_start_up_stops_at_once(monkeypatch):
    from avatar_app.serve import cli, server

    monkeypatch.setattr(server, "EngineServer", _FakeServer)
    monkeypatch.setattr(_FakeServer, "start_s", 120.0)  # engines building (longer than any loaded machine's lag)
    _FakeServer.instances.clear()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    out = io.StringIO()
    assert cli.run_serve(_serve_args(), out) == 0
    fake = _FakeServer.instances[0]
    # stopped inside start-up, not after it (no wall-time bound: the start never finished)
    assert fake.calls == ["start", "stop"] and not getattr(fake, "start_finished", False)
    assert "stopped during start-up" in out.getvalue() and "ready" not in out.getvalue()


def test_listening_beyond_loopback_needs_host_and_warns(monkeypatch):
    from avatar_app.serve import cli, server

    monkeypatch.setattr(server, "EngineServer", _FakeServer)
    _FakeServer.instances.clear()
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    out = io.StringIO()
    assert cli.run_serve(_serve_args(host="0.0.0.0"), out) == 0
    text = out.getvalue()
    assert text.count("no authentication") == 2  # before start-up and with the endpoints
    assert _FakeServer.instances[0].options.host == "0.0.0.0"
    assert "WARNING" not in text and text.count("warning: ") == 2  # the CLI's one style
    from avatar_app.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"  # loopback unless --host says otherwise


def test_an_address_that_cannot_be_bound_fails_without_the_exposure_warning(monkeypatch):
    """--host 999.1.1.1 (new-user trial): one error, no "reachable from other machines" before it."""
    from avatar_app.serve import cli, server

    monkeypatch.setattr(server, "EngineServer", _FakeServer)
    _FakeServer.instances.clear()
    out = io.StringIO()
    with pytest.raises(InputError, match=r"cannot listen on 999\.1\.1\.1"):
        cli.run_serve(_serve_args(host="999.1.1.1"), out)
    assert out.getvalue() == "" and not _FakeServer.instances


def test_serve_refuses_remote_and_unknown_backends():
    from avatar_app.serve import cli

    with pytest.raises(InputError, match="not 'remote'"):
        cli._options(_serve_args(backend="remote"))
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        cli._options(_serve_args(engine=["face_recon=nope"]))
    assert cli._options(_serve_args(precision="fp16")).default == EngineChoice(None, Precision.FP16.value)


def test_summary_of_a_server_that_never_answered_does_not_claim_it_served():
    """A refused or unresolvable server: the summary says it never answered (second new-user trial)."""
    import time as _time
    from types import SimpleNamespace

    from avatar_app.inference.remote import SwitchEvent
    from avatar_app.serve.remote_render import _FrameClock, finished_locally

    ev = SwitchEvent("local", 0, _time.time(), "connection refused", "speech2face")
    local = SimpleNamespace(describe=lambda: "speech2face.onnx on ort_cpu (fp32)")
    for calls, want, unwanted in ((0, "never answered", "before that"), (12, "before that the server", "never")):
        report = SimpleNamespace(speech_backend="speech2face.onnx on remote grpc://127.0.0.1:9", face_solver="solver")
        runner = SimpleNamespace(events=[ev], local=local, remote_calls=calls)
        text = finished_locally(report, runner, _FrameClock(None), 25.0, "grpc://127.0.0.1:9")
        assert want in text and unwanted not in text and report.speech_backend == text, text


def test_remote_render_of_a_clip_without_audio_says_the_mouth_follows_the_video(tmp_path, testdata):
    """The remote path built its speech runner before it knew the clip is silent; the summary then said
    the mouth came from speech2face (second trial, ninth session)."""
    import av

    from tests.helpers import run_main

    src = testdata / "video" / "grid_s1_bbaf2n.mp4"
    mute = tmp_path / "mute.mp4"
    with av.open(str(src)) as c, av.open(str(mute), "w") as out:  # the video stream only, packets copied
        vs = out.add_stream_from_template(c.streams.video[0])
        for pkt in c.demux(c.streams.video[0]):
            if pkt.dts is not None:
                pkt.stream = vs
                out.mux(pkt)
    proc = run_main("render", str(mute), "-o", str(tmp_path / "o.mp4"), "--size", "96x64",
                    "--remote", "grpc://127.0.0.1:1")
    assert proc.returncode == 0, proc.stderr
    assert "mouth from the video alone" in proc.stdout and "speech2face" not in proc.stdout, proc.stdout


def test_a_killed_server_not_yet_reaped_is_not_running(tmp_path):
    """New-user trial: after `kill -9` of a serve whose parent had not reaped it, the next serve kept
    its workspace (24 MB in /tmp): a zombie's PID answers kill(pid, 0)."""
    import os
    import subprocess
    import sys
    import time

    from avatar_app.inference.triton_client import _pid_alive
    from avatar_app.serve.server import WORKSPACE_PREFIX, _remove_stale_workspaces

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # exited, not reaped (no wait/poll): a zombie
            try:
                state = open(f"/proc/{child.pid}/stat").read().rpartition(")")[2].split()[0]
            except OSError:
                pytest.skip("no /proc on this system")
            if state == "Z":
                break
            time.sleep(0.01)
        assert state == "Z"
        assert not _pid_alive(child.pid)
        ws = tmp_path / f"{WORKSPACE_PREFIX}{child.pid}-abcd1234"
        ws.mkdir()
        (tmp_path / f"{WORKSPACE_PREFIX}{os.getpid()}-mine").mkdir()  # this process: kept
        _remove_stale_workspaces(tmp_path)
        assert not ws.exists() and (tmp_path / f"{WORKSPACE_PREFIX}{os.getpid()}-mine").exists()
    finally:
        child.wait()
    assert _pid_alive(os.getpid())
