"""Builds and first loads in a spawned child: crashes are reported and survived."""
from __future__ import annotations

import pytest
from inference_helpers import (
    CrashingBackend,
    child_add,
    child_busy,
    child_progress,
    child_raise_input_error,
    segfault,
)

from avatar_app.core.errors import InputError
from avatar_app.inference import (
    ChildCrashError,
    EngineCache,
    EngineManager,
    Precision,
    run_isolated,
)
from avatar_app.inference.backends import register_backend, unregister_backend


def test_child_result_error_and_progress():
    assert run_isolated(child_add, 2, 3, label="add") == 5
    with pytest.raises(InputError, match="bad thing"):
        run_isolated(child_raise_input_error, "bad thing", label="raise")
    seen = []
    assert run_isolated(child_progress, 3, label="progress", progress=lambda s, f: seen.append((s, f))) == 3
    assert seen == [("step 0", 1 / 3), ("step 1", 2 / 3), ("step 2", 1.0)]


def test_child_crash_is_reported_and_survived():
    with pytest.raises(ChildCrashError, match="killed by SIGSEGV") as info:
        run_isolated(segfault, label="crash test")
    assert info.value.exitcode == -11 and "crash test" in str(info.value)
    assert run_isolated(child_add, 1, 1) == 2  # the parent is fine and can start more children


@pytest.fixture
def crashy():
    register_backend(CrashingBackend())
    yield
    unregister_backend("crashy")


def test_crash_during_build_falls_back(tiny_models, user_dirs, crashy):
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=True, timeout_s=120)
    result = mgr.open_engine(tiny_models["matmul"], "crashy", "fp32")
    with result.runner as r:
        assert (r.backend, r.precision) == ("ort_cpu", Precision.FP32)
    first = result.attempts[0]
    assert first.backend == "crashy" and not first.ok
    assert "killed by SIGSEGV" in first.reason
    assert mgr.cache.entries() == []  # nothing half-built left behind as usable


def test_isolated_build_loads_and_verifies_in_child(tiny_models, user_dirs):
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=True, timeout_s=120)
    stages = []
    entry = mgr.build(tiny_models["layernorm"], "ort_cpu", "fp16", progress=lambda s, f: stages.append(s))
    assert entry.manifest.status == "ok" and entry.manifest.load_checked
    assert entry.manifest.verification_result.passed
    assert stages[0].startswith("checking float16") and stages[-1] == "done"


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux scheduling policies")
def test_child_runs_at_lowest_priority_with_capped_threads(monkeypatch):
    """Builds and INT8 calibration never compete with the live view: nice 19, SCHED_IDLE, half the CPUs,
    thread pools capped (the app's default; the suite itself runs children at normal priority)."""
    import os

    monkeypatch.delenv("AVATAR_APP_CHILD_PRIORITY", raising=False)

    from avatar_app.inference.isolation import CHILD_NICE, child_thread_cap
    from inference_helpers import child_report_limits

    cap = child_thread_cap()
    parent_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    got = run_isolated(child_report_limits, label="limits")
    assert got["threads"] and all(nice == CHILD_NICE and policy == os.SCHED_IDLE
                                  for nice, policy in got["threads"].values()), got["threads"]
    assert got["new_thread"] == (CHILD_NICE, os.SCHED_IDLE)  # threads started later inherit both
    assert got["cpus"] == cap <= max(1, len(os.sched_getaffinity(0)) // 2)
    assert got["env"] == {k: str(cap) for k in got["env"]}
    if got["blas_threads"] is not None:
        assert got["blas_threads"] and max(got["blas_threads"]) <= cap
    # the parent is untouched: its priority, policy and environment
    assert os.getpriority(os.PRIO_PROCESS, 0) < CHILD_NICE and os.sched_getscheduler(0) != os.SCHED_IDLE
    assert {k: os.environ.get(k) for k in parent_env} == parent_env
    assert child_thread_cap(2) == 1 and child_thread_cap(1) == 1 and child_thread_cap(64) == 4


@pytest.mark.skipif(not hasattr(__import__("os"), "SCHED_IDLE"), reason="needs Linux scheduling policies")
def test_child_priority_normal_keeps_the_parents_priority_and_caps_threads(monkeypatch):
    """AVATAR_APP_CHILD_PRIORITY=normal (the test suite's setting): the parent's nice and policy,
    CPUs and thread pools still capped."""
    import os

    from avatar_app.inference.isolation import child_thread_cap
    from inference_helpers import child_report_limits

    monkeypatch.setenv("AVATAR_APP_CHILD_PRIORITY", "normal")
    got = run_isolated(child_report_limits, label="limits")
    parent = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
    assert got["threads"] and all(v == parent for v in got["threads"].values()), (got["threads"], parent)
    assert got["new_thread"] == parent
    assert got["cpus"] == child_thread_cap()


def test_live_child_duty_follows_priority_and_variable(monkeypatch):
    """Pacing is part of the background policy: on by default (0.5 of a core), off with the suite's
    ``normal`` priority, set or turned off (``1``, nonsense) by AVATAR_APP_CHILD_DUTY."""
    from avatar_app.inference.isolation import CHILD_DUTY_ENV, CHILD_PRIORITY_ENV, LIVE_CHILD_DUTY, live_child_duty

    monkeypatch.delenv(CHILD_PRIORITY_ENV, raising=False)
    monkeypatch.delenv(CHILD_DUTY_ENV, raising=False)
    assert live_child_duty() == LIVE_CHILD_DUTY
    for raw, want in (("0.3", 0.3), ("1", None), ("0", None), ("lots", None)):
        monkeypatch.setenv(CHILD_DUTY_ENV, raw)
        assert live_child_duty() == want, raw
    monkeypatch.setenv(CHILD_DUTY_ENV, "0.3")
    monkeypatch.setenv(CHILD_PRIORITY_ENV, "normal")
    assert live_child_duty() is None


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs Linux /proc")
def test_pacer_stops_a_busy_child_and_always_continues_it():
    """A busy process over its share is stopped (state T), continued once its share falls back, and
    resume() leaves it running; a process that is gone is left alone."""
    import subprocess
    import sys
    import time

    from avatar_app.inference.isolation import _Pacer

    def state(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        pacer = _Pacer(proc.pid, duty=0.1)
        seen = set()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not ({"T", "R"} <= seen and pacer.stopped_s > 0):
            pacer.step()
            seen.add("T" if pacer.stopped else "R")
            if pacer.stopped:  # (a signal is delivered asynchronously)
                until = time.monotonic() + 2.0
                while state(proc.pid) != "T" and time.monotonic() < until:
                    time.sleep(0.005)
                assert state(proc.pid) == "T"
            time.sleep(0.02)
        assert "T" in seen and pacer.stopped_s > 0  # stopped, then continued
        pacer.step()
        pacer.resume()
        assert not pacer.stopped and state(proc.pid) != "T"
    finally:
        proc.kill()
        proc.wait()
    pacer.step()  # gone: nothing to stop
    assert not pacer.stopped


def test_paced_child_still_answers_with_progress():
    """A paced job (duty 0.2) returns its result and every progress report reaches the parent (0.15 s of
    CPU: ~0.75 s paced, past the pacer's 0.5 s window, and three progress reports)."""
    seen = []
    used = run_isolated(child_busy, 0.15, label="busy", duty=0.2, progress=lambda s, f: seen.append(f))
    assert used >= 0.15
    assert seen and seen == sorted(seen)
