"""Swapping an engine's precision while calls keep coming."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from avatar_app.core.errors import ModelLoadError
from avatar_app.inference import EngineCache, EngineManager, EngineSlot, Precision
from avatar_app.inference.base import DEFAULT_TOLERANCES
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set
from avatar_app.inference.ort import OrtRunner


def test_swap_precision_every_fifth_of_a_second_loses_no_call(tiny_models, user_dirs):
    """Back-to-back calls while the precision is asked to change every 0.2 s, 20 times (4 s; 0.5 s
    and 10 s before: later requests supersede queued ones, so what is checked does not depend on
    the interval, only how many swaps happen, and at least two must).

    Every call returns, from an open engine that passed verification (or the FP32
    reference), within that engine's tolerance of the reference; builds run in
    child processes as in the app.
    """
    path = tiny_models["layernorm"]
    info = ModelInfo.from_onnx(path)
    x = load_feed_set(info.validation_path, info.inputs)["x"]
    with OrtRunner.from_path(path) as ref:
        expected = [ref.infer({"x": x[i:i + 1]})["y"] for i in range(len(x))]
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=True, timeout_s=600)
    changes = []
    slot = EngineSlot(mgr, path, on_change=lambda res, err: changes.append((res, err)))
    slot.open("ort_cpu", "fp32")
    stop = threading.Event()
    calls, served, errors = [0], {}, []

    def loop():
        i = 0
        while not stop.is_set():
            k = i % len(x)
            try:
                out, runner = slot.infer_with({"x": x[k:k + 1]})
                assert runner.is_open
                assert runner.verification is None and runner.precision is Precision.FP32 \
                    or runner.verification.passed
                err = float(np.abs(out["y"] - expected[k]).max())
                assert err <= DEFAULT_TOLERANCES[runner.precision], (runner.describe(), err)
                served[runner.precision] = served.get(runner.precision, 0) + 1
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
            calls[0] += 1
            i += 1
            time.sleep(0.002)  # a fast frame source; leaves the shared cores some air

    worker = threading.Thread(target=loop, name="infer-loop")
    worker.start()
    futures = []
    order = [Precision.FP16, Precision.INT8, Precision.FP32]
    t0 = time.monotonic()
    try:
        for n in range(20):  # every 0.2 s for 4 s
            futures.append(slot.request("ort_cpu", order[n % 3]))
            time.sleep(max(0.0, t0 + 0.2 * (n + 1) - time.monotonic()))
        for f in futures:
            f.result(timeout=600)  # generous: only a failing run waits it out
        # enough calls across the swaps whatever the machine's speed (waits only on a slow machine)
        deadline = time.monotonic() + 120
        while calls[0] <= 100 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(30)
        last_active = [slot.active]
        slot.close()
    assert not errors, errors[:3]
    assert calls[0] == sum(served.values()) > 100
    # Later requests supersede queued ones, so how many swaps happen depends on the
    # machine's speed; at least two did, and the last request (INT8) won: its engine serves.
    assert slot.swaps >= 2 and len(served) >= 2
    last = futures[-1].result()
    assert last is not None and last_active[0] is last.runner
    if last.runner.precision is not Precision.INT8:
        # INT8 did not pass verification on this CPU (ONNX Runtime's INT8 kernels saturate on
        # x86 without VNNI): the fallback serves and the INT8 attempt says why
        int8 = [a for a in last.attempts if a.precision == "int8"]
        assert int8 and not int8[0].ok and int8[0].reason, last.attempts
    assert all(err is None for _, err in changes)
    with pytest.raises(ModelLoadError, match="not open"):
        slot.active


def test_failed_request_keeps_old_engine(tiny_models, user_dirs):
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)
    with EngineSlot(mgr, tiny_models["fp16_overflow"]) as slot:
        slot.open()
        before = slot.active
        res = slot.request("ort_cpu", "fp16").result(timeout=60)
        # FP16 rejected by verification: the fallback (FP32 CPU) serves, with the reason kept.
        assert res.runner.precision is Precision.FP32
        assert "float16 maximum" in res.attempts[0].reason
        assert slot.active is res.runner and not before.is_open
        y = slot.infer({"x": np.full((2, 64), 0.7, np.float32)})["y"]
        assert y.shape == (2, 8) and np.isfinite(y).all()


def test_new_engine_is_warmed_up_on_the_worker_before_the_swap(tiny_models, user_dirs, monkeypatch):
    """The new engine's first call runs on the slot's worker with the last call's feeds, before it
    serves: the processing thread's first call after the swap is not the session's first."""
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)
    calls = []
    real = OrtRunner.infer

    def spy(self, feeds):
        calls.append((self, threading.current_thread().name, {k: v.shape for k, v in feeds.items()}))
        return real(self, feeds)

    with EngineSlot(mgr, tiny_models["layernorm"]) as slot:
        slot.open("ort_cpu", "fp32")
        x = np.full((2, 5, 32), 0.5, np.float32)
        slot.infer({"x": x})
        monkeypatch.setattr(OrtRunner, "infer", spy)
        res = slot.request("ort_cpu", "fp16").result(timeout=120)
        assert res.runner.precision is Precision.FP16 and slot.active is res.runner
        mine = [c for c in calls if c[0] is res.runner]  # (the verification's runner is another one)
        assert len(mine) == 1 and mine[0][1].startswith("engine-swap") and mine[0][2] == {"x": (2, 5, 32)}
        n = len(calls)
        slot.infer({"x": x})
        assert len(calls) == n + 1  # the serving call itself
