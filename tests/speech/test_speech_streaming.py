"""The animator's conv-state streaming path (issue 18) against its window path, on real GRID audio.

Both animators get the same windows at the same times: video rates with uneven hop counts, a
gap longer than ``max_hops``, time going back (a seek) and ``reset()``. The streaming one must
give the window one's raw outputs and weights, restart its state exactly where the window path
restarts its feature cache, and give after a seek what a fresh animator gives.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from avatar_app.core.errors import ModelLoadError
from avatar_app.inference import EngineManager
from avatar_app.inference import conv_state as conv_state_mod
from avatar_app.speech.engine_animator import EngineSpeechAnimator, default_model_path
from tests.helpers import load_mono16k

SR = 16000
TOL = 1e-4


def _animator(streaming: bool) -> EngineSpeechAnimator:
    return EngineSpeechAnimator(default_model_path(), manager=EngineManager(isolate=False), streaming=streaming)


@pytest.fixture(scope="module")
def pair():
    stream, window = _animator(True), _animator(False)
    assert stream.stream_engine() is not None and window.stream_engine() is None
    assert stream.describe().endswith("conv-state") and "conv-state" not in window.describe()
    yield stream, window
    stream.close()
    window.close()


@pytest.fixture(scope="module")
def speech(testdata) -> np.ndarray:
    return np.concatenate([load_mono16k(testdata / "audio" / n) for n in ("grid_s1_bbaf2n.wav", "grid_s2_swwp2s.wav")])


def _window(animator, speech, t_s):
    n = int(animator.context_s * SR)
    end = int(round(t_s * SR))
    w = np.zeros(n, np.float32)
    seg = speech[max(0, end - n):end]
    w[n - len(seg):] = seg
    return w


class _StepSpy:
    """Records the frame count of each conv-state call (65: a zero-state restart)."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self._step = engine.step

    def __call__(self, features, state):
        self.calls.append((features.shape[1], state is self.engine.zero_state()))
        return self._step(features, state)


def _times():
    """25 fps, then 30 fps (3 or 4 new hops), a 0.5 s gap (> max_hops), 60 fps (1-2 hops)."""
    t = [k / 25 for k in range(1, 75)]
    t += [3.0 + k / 30 for k in range(1, 60)]
    t += [5.5 + k / 60 for k in range(1, 60)]
    return t


def test_streaming_equals_the_window_path(pair, speech, monkeypatch):
    stream, window = pair
    spy = _StepSpy(stream.stream_engine())
    monkeypatch.setattr(stream.stream_engine(), "step", spy)
    stream.reset(), window.reset()
    worst_raw = worst_w = peak = 0.0
    for t in _times():
        ws = stream.process(_window(stream, speech, t), t)
        ww = window.process(_window(window, speech, t), t)
        worst_raw = max(worst_raw, float(np.abs(stream.last_raw - window.last_raw).max()))
        worst_w = max(worst_w, float(np.abs(ws - ww).max()))
        peak = max(peak, float(ww.max()))
    assert worst_raw <= TOL and worst_w <= TOL
    assert peak > 0.1  # the clips hold speech: the comparison is not between zeros
    restarts = [k for k, (n, zero) in enumerate(spy.calls) if zero]
    # a restart at the first frame and after the 0.5 s gap only; the state carries everything else
    assert restarts == [0, 74 + 59] and all(spy.calls[k][0] == 65 for k in restarts)
    steps = {n for n, zero in spy.calls if not zero}  # the new hops only (7: the 25 -> 30 fps change)
    assert {1, 2, 3, 4} <= steps and max(steps) <= stream.max_hops


def test_seek_back_and_reset_equal_a_fresh_start(pair, speech):
    stream, _ = pair
    times = [1.0 + k / 25 for k in range(40)]
    stream.reset()
    for k in range(1, 80):  # play 0.04-3.16 s, then seek back to 1.0 s
        stream.process(_window(stream, speech, k / 25), k / 25)
    seek = [stream.process(_window(stream, speech, t), t) for t in times]
    fresh = _animator(True)
    try:
        want = [fresh.process(_window(fresh, speech, t), t) for t in times]
        for a, b in zip(seek, want):
            np.testing.assert_array_equal(a, b)  # the same features through the same zero-state call
        stream.reset()
        assert stream._state is None
        again = [stream.process(_window(stream, speech, t), t) for t in times]
        for a, b in zip(again, want):
            np.testing.assert_array_equal(a, b)
    finally:
        fresh.close()


def test_engine_swap_restarts_the_state(pair, speech):
    stream, window = pair
    stream.reset(), window.reset()
    first = stream.stream_engine()
    for t in (0.04, 0.08, 0.12):
        stream.process(_window(stream, speech, t), t)
    stream.slot.open()  # the slot serves a new runner and its own conv-state graph
    assert stream.stream_engine() not in (None, first) and first.source is not stream.slot.active
    for t in (0.04, 0.08, 0.12, 0.16, 0.20):
        window.process(_window(window, speech, t), t)
    stream.process(_window(stream, speech, 0.16), 0.16)  # zero-state restart on the new engine
    assert stream._state_owner is stream.stream_engine()
    stream.process(_window(stream, speech, 0.20), 0.20)
    np.testing.assert_allclose(stream.last_raw, window.last_raw, rtol=0, atol=TOL)


def test_failed_derivation_falls_back_to_the_window_call(monkeypatch, caplog, speech):
    def fail(runner):
        raise ModelLoadError("no Pad here")

    monkeypatch.setattr(conv_state_mod, "derive_conv_state", fail)
    with caplog.at_level(logging.WARNING, logger="avatar_app.inference.swap"):
        a = _animator(True)
    try:
        assert a.stream_engine() is None
        assert "no conv-state streaming" in caplog.text and "no Pad here" in caplog.text
        w = a.process(_window(a, speech, 1.0), 1.0)
        assert w.shape == (52,) and np.isfinite(w).all()
    finally:
        a.close()


def test_the_old_engine_streams_while_a_requested_one_derives(monkeypatch, speech):
    """A background request derives the new engine's graph before the swap: the old pair serves meanwhile."""
    import threading

    a = _animator(True)
    gate, real = threading.Event(), conv_state_mod.derive_conv_state

    def slow(runner):
        assert gate.wait(30)
        return real(runner)

    try:
        old = a.stream_engine()
        monkeypatch.setattr(conv_state_mod, "derive_conv_state", slow)
        future = a.slot.request("ort_cpu", "fp32")
        for t in (0.04, 0.08, 0.12):  # the derivation waits: the old engine streams on, nothing blocks
            a.process(_window(a, speech, t), t)
            assert a.stream_engine() is old and a._state_owner is old and a._state_hop == round(t * 100)
        gate.set()
        assert future.result(timeout=60) is not None
        new = a.stream_engine()
        assert new not in (None, old)
        a.process(_window(a, speech, 0.16), 0.16)
        assert a._state_owner is new and a._state_hop == 16
    finally:
        gate.set()
        a.close()
