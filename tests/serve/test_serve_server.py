"""avatar-app serve on Triton Inference Server: health, metrics, every shipped engine, loopback only,
remote engines equal to local ones (with and without shared memory), fallback and reconnection, clean stop
by SIGTERM to the server's process group without leaked shared memory.

One server (a child process on free loopback ports) serves the module.
"""
from __future__ import annotations

import ipaddress
import json
import signal
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from serve_fixtures import Relay, ServeProcess, needs_pytriton

from avatar_app.core.clock import now_ns
from avatar_app.inference.calibration import validation_set
from avatar_app.inference.modelinfo import ModelInfo, iter_batches
from avatar_app.inference.ort import OrtRunner
from avatar_app.inference.remote import RemoteRunner, TritonRunner, server_engines, session_path
from avatar_app.inference.verify import verify
from avatar_app.serve.server import shipped_models

pytestmark = [pytest.mark.slow, needs_pytriton]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The module's server, leader of a process group of its own (the last test stops the group);
    ``segments_before``: /dev/shm's names before it started."""
    before = _segments()
    s = ServeProcess(tmp_path_factory.mktemp("serve") / "cache", own_group=True).start()
    s.segments_before = before
    yield s
    s.stop()


@pytest.fixture
def client_env(server, monkeypatch):
    """This process sees the server's session file (same user, same host: shared memory allowed)."""
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(server.cache_dir))
    return server


def test_serve_answers_health_metrics_and_serves_every_shipped_engine(server):
    assert server.http("/v2/health/live")[0] == 200
    assert server.http("/v2/health/ready")[0] == 200
    status, text = server.http("/metrics", server.metrics_port)
    assert status == 200
    names = [p.stem for p in shipped_models()]
    assert {"face_recon", "speech2face"} <= set(names)
    for name in names:  # Triton's own Prometheus counters, one per served model
        assert f'nv_inference_count{{model="{name}",version="1"}}' in text
        assert f'nv_inference_exec_count{{model="{name}",version="1"}}' in text
    served = server_engines("127.0.0.1", server.grpc_port)["models"]
    assert set(served) == set(names)
    for p in shipped_models():
        entry = served[p.stem]
        assert entry["sha256"] == ModelInfo.from_onnx(p).sha256
        assert entry["backend"] == "ort_cpu" and entry["precision"] == "fp32"  # this CPU machine
        assert entry["max_batch_size"] >= 1
    out = "\n".join(server.lines)
    assert "no authentication" not in out  # loopback: no warning
    assert all(f"  {n}" in out for n in names) and "NOT SERVED" not in out


def test_the_stub_loads_this_interpreters_libpython(server):
    """The Python-backend stubs run (they answered above) with the interpreter's lib folder first."""
    import psutil

    from avatar_app.serve.environment import interpreter_lib_dir

    lib = interpreter_lib_dir()
    stubs = [p for p in server.tree() if p.name().startswith("triton_python")]
    assert len(stubs) == len(shipped_models()) + 1  # one per engine and the description model
    for p in stubs:
        try:
            env = p.environ()
        except psutil.AccessDenied:
            pytest.skip("cannot read the stub's environment")
        if lib is not None:
            assert env["LD_LIBRARY_PATH"].split(":")[0] == str(lib)


def test_nothing_listens_beyond_loopback(server):
    import psutil

    listening = [(c.laddr.ip, c.laddr.port) for p in server.tree()
                 for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    ports = {port for _, port in listening}
    assert {server.grpc_port, server.http_port, server.metrics_port} <= ports
    assert listening and all(_loopback(ip) for ip, _ in listening), listening


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback  # '::ffff:127.0.0.1' too


@pytest.mark.parametrize("shared_memory", [True, False])
def test_served_engines_equal_local_ones(client_env, shared_memory):
    for path in shipped_models():
        info = ModelInfo.from_onnx(path)
        data, source = validation_set(info)
        data = {k: v[:64] for k, v in data.items()}
        with TritonRunner(client_env.url, info, shared_memory=shared_memory, timeout_s=30) as remote, \
                OrtRunner.from_path(path) as reference:
            assert remote.uses_shared_memory is shared_memory
            batch = info.dynamic_dims["B"].max if "B" in info.dynamic_dims else 1
            result = verify(remote, data, info.tolerances[remote.precision], reference=reference, batch=batch,
                            data_source=source)
            assert result.passed, result.reason
            assert result.max_abs_error == 0.0  # the same ORT CPU FP32 engine runs on the server


def test_shared_memory_is_chosen_on_the_same_host_only(client_env, tmp_path, monkeypatch):
    info = ModelInfo.from_onnx(shipped_models()[0])
    with TritonRunner(client_env.url, info) as r:
        assert r.uses_shared_memory and "shared memory" in r.describe()
    session = json.loads(session_path(client_env.grpc_port).read_text())
    assert session["pid"] == client_env.proc.pid and session["token"]
    assert session_path(client_env.grpc_port).stat().st_mode & 0o077 == 0  # only its user reads the token
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path))  # another user's view: no session file
    with TritonRunner(client_env.url, info) as r:
        assert not r.uses_shared_memory


def test_a_shared_memory_failure_falls_back_to_plain_grpc(client_env, monkeypatch):
    from avatar_app.inference import triton_client

    def refuse(self, *a, **k):
        raise OSError("shm_open: no such file (another /dev/shm)")

    path = shipped_models()[0]
    info = ModelInfo.from_onnx(path)
    x = next(iter_batches(validation_set(info)[0], 2))
    with TritonRunner(client_env.url, info, timeout_s=30) as r, OrtRunner.from_path(path) as ref:
        assert r.uses_shared_memory
        monkeypatch.setattr(triton_client._ShmRegion, "__init__", refuse)
        got, want = r.infer(x), ref.infer(x)
        assert not r.uses_shared_memory
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_remote_runner_falls_back_within_a_second_and_reconnects(client_env, record_property):
    path = next(p for p in shipped_models() if p.stem == "face_recon")
    info = ModelInfo.from_onnx(path)
    data, _ = validation_set(info)
    x = next(iter_batches(data, 1))
    relay = Relay(client_env.grpc_port)
    runner = RemoteRunner(f"grpc://127.0.0.1:{relay.port}", info, OrtRunner.from_path(path),
                          reference=lambda: OrtRunner.from_path(path).open(), retry_s=0.2)
    try:
        with runner:
            assert runner.is_remote and runner.verification.passed
            y0 = runner.infer(x)
            assert runner.remote_calls == 1
            # the server stops answering (connections held, nothing comes back): local within 1 s
            relay.stalled.set()
            t0 = now_ns()
            y1 = runner.infer(x)
            waited_s = (now_ns() - t0) / 1e9
            record_property("fallback_s", round(waited_s, 3))  # wall time: recorded, not asserted
            # "within a second" without a wall clock: the stalled call was ended by its own deadline
            # (the runner's call timeout, under 1 s), not by a connection error or after a hang
            assert runner.timeout_s < 1.0
            assert "Deadline Exceeded" in runner.events[-1].reason, runner.events[-1].reason
            assert not runner.is_remote and runner.local_calls == 1
            assert runner.events[-1].to == "local" and runner.events[-1].model == "face_recon"
            for k in y0:
                np.testing.assert_allclose(y1[k], y0[k], atol=info.tolerances[runner.local.precision])
            # the network goes away altogether, then comes back: the runner reconnects by itself
            relay.cut()
            relay.stalled.clear()
            runner.infer(x)
            assert runner.local_calls == 2
            relay.restore()
            deadline = time.monotonic() + 60
            while not runner.is_remote and time.monotonic() < deadline:
                time.sleep(0.1)
            assert runner.is_remote, [e.reason for e in runner.events]
            assert [e.to for e in runner.events] == ["local", "remote"]
            runner.infer(x)
            assert runner.remote_calls == 2
    finally:
        relay.close()


def _segments() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.iterdir()} if shm.is_dir() else set()


def _mapped_by_other_processes() -> set[str]:
    """Names of /dev/shm segments that a live process other than this one maps (e.g. the server of a
    serve test running on the other xdist worker): those are not this server's leak."""
    import os

    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        if maps.parent.name == str(os.getpid()):
            continue
        try:
            text = maps.read_text()
        except OSError:  # the process ended, or is not ours to read
            continue
        names |= {ln.rsplit("/dev/shm/", 1)[1].split()[0] for ln in text.splitlines() if "/dev/shm/" in ln}
    return names


def _leaked(before: set[str]) -> set[str]:
    """Segments new since ``before`` that Python's shared_memory (``psm_``) or the app (``avatar_app_``)
    made and that no other live process maps (JACK's ``jack_db-*`` of an audio test is not ours)."""
    new = {n for n in _segments() - before if n.startswith(("psm_", "avatar_app_"))}
    return new - _mapped_by_other_processes()


@pytest.mark.gl
def test_sigterm_to_the_group_stops_the_server_without_leftovers(server, short_grid_clip, tmp_path, monkeypatch):
    """`avatar-app serve` stopped by SIGTERM to its process group after serving a render (as
    ``timeout`` or a service manager does; issue 21, trial fixes 5): exit status 0, no process, session
    file or workspace left, no shared memory leaked or reported leaked.

    One test for what two servers checked before (SIGTERM to the serve process alone, and to its
    group in test_serve_shutdown.py): the group's signal reaches the serve process as the lone one
    does, and its stop is the same code; the CLI's own SIGTERM/SIGINT handling is
    test_serve_units.py::test_ctrl_c_and_sigterm_stop_serve_cleanly, a kill test_serve_render.py.
    ``short_grid_clip``: grid_s1_bbaf2n's first 0.4 s (conftest).
    """
    import psutil

    from avatar_app.pipeline import RenderOptions
    from avatar_app.serve.remote_render import render_file_remote

    tree = server.tree()
    assert any(p.name() == "tritonserver" for p in tree)
    workspaces = list(Path(tempfile.gettempdir()).glob(f"avatar-serve-{server.proc.pid}-*"))
    assert len(workspaces) == 1 and workspaces[0].is_dir()
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(server.cache_dir))
    opts = RenderOptions(size=(96, 64), face="engine")  # both engines serve requests (both use shared memory)
    try:
        rep = render_file_remote(server.url, short_grid_clip, tmp_path / "out.mp4", opts)
        assert "on remote" in rep.speech_backend and rep.frames_out > 0
    finally:
        status = server.stop_group(signal.SIGTERM, timeout_s=60)
    out = "\n".join(server.lines + server.errors)
    assert status == 0, out  # exited by itself within its timeout
    assert "leaked shared_memory" not in out and "resource_tracker" not in out, out
    assert "stopping" in server.lines
    leaked = _leaked(server.segments_before)
    assert not leaked, leaked
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree[1:]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree[1:] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (server.cache_dir / "serve" / f"triton-{server.grpc_port}.json").exists()
    assert not workspaces[0].exists()
