"""The render thread: ordered (offline) and newest-wins (live) hand-off, errors, the one context picker."""
from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from avatar_app.core.errors import BackendUnavailableError, InputError
from avatar_app.core.types import AvatarState
from avatar_app.render.thread import RenderPolicy, RenderThread

pytestmark = pytest.mark.gl


def _states(n: int) -> list[AvatarState]:
    base = AvatarState.neutral()
    return [replace(base, media_time_s=i / 30, frame_index=i, stamps={"fuse": (0, 1)}) for i in range(n)]


def test_ordered_policy_renders_every_state_in_order():
    got = []
    rt = RenderThread(RenderPolicy.ORDERED, lambda f: got.append(f), size=(64, 48), queue_size=2).start(wait=True)
    for st in _states(12):
        rt.submit(st)
    rt.finish()
    assert [f.state.frame_index for f in got] == list(range(12))
    assert all(f.image.shape == (48, 64, 3) and f.image.dtype == np.uint8 for f in got)
    assert all("render" in f.state.stamps and "fuse" in f.state.stamps for f in got)
    assert len({id(f.image) for f in got}) == 12  # a new array per frame
    assert not rt.alive


def test_newest_policy_replaces_what_waits_and_counts_capture_skips():
    gate, entered = threading.Event(), threading.Event()
    got = []

    def on_frame(f):
        entered.set()
        gate.wait(10)  # hold the thread in the first render so that submissions pile up
        got.append(f)

    rt = RenderThread(RenderPolicy.NEWEST, on_frame, size=(32, 32)).start(wait=True)
    states = _states(6)
    try:
        first = rt.submit(states[0], capture=(40, 30, 3))
        assert entered.wait(10)
        for st in states[1:]:
            last = rt.submit(st, capture=(40, 30, 3))
        gate.set()
        assert rt.wait_done(last, 10)
    finally:
        rt.stop()
    indices = [f.state.frame_index for f in got]
    assert indices == [0, 5], indices  # 1..4 waited behind 0 and were replaced, newest first
    assert rt.skipped == 4
    assert got[-1].captured.shape == (30, 40, 3)
    assert first < last


def test_a_setup_failure_is_reported(monkeypatch):
    import avatar_app.render.context as context

    def boom(*a, **k):
        raise Exception("libEGL.so.1: cannot open shared object file")

    monkeypatch.setattr(context.moderngl, "create_standalone_context", boom)
    heard = []
    rt = RenderThread(RenderPolicy.NEWEST, lambda f: None, on_failed=heard.append)
    with pytest.raises(BackendUnavailableError, match="OpenGL 3.3"):
        rt.start(wait=True)
    rt.stop()
    assert heard and "OpenGL 3.3 could not be started" in heard[0] and "libEGL" in heard[0]


def test_bad_size_is_refused_and_an_error_in_the_sink_reaches_the_caller():
    with pytest.raises(InputError, match="render size"):
        RenderThread(RenderPolicy.ORDERED, lambda f: None, size=(0, 10))

    def sink(f):
        raise RuntimeError("disk full")

    rt = RenderThread(RenderPolicy.ORDERED, sink, size=(16, 16)).start(wait=True)
    rt.submit(AvatarState.neutral())
    with pytest.raises(RuntimeError, match="disk full"):
        rt.finish()


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the ctypes draw path is EGL's")
def test_render_thread_draws_without_the_gil_and_matches_moderngl_pixel_for_pixel():
    # the live render thread issues its draw calls through ctypes (llvmpipe shades the vertices in
    # the draw call; through moderngl the GIL was held meanwhile): same pixels as VertexArray.render
    rng = np.random.default_rng(3)
    st = replace(AvatarState.neutral(), weights=rng.random(52).astype(np.float32) * 0.6, stamps={"fuse": (0, 1)})
    got = []
    rt = RenderThread(RenderPolicy.ORDERED, got.append, size=(96, 80)).start(wait=True)
    try:
        assert rt.renderer.draw_elements is not None
        assert rt.wait_done(rt.submit(st), 10)
        rt.renderer.draw_elements, gil_free = None, rt.renderer.draw_elements  # moderngl's path for the second
        rt.submit(st)
    finally:
        rt.finish()
    assert gil_free is not None and len(got) == 2
    assert got[0].image.std() > 1  # a picture, not a cleared target
    np.testing.assert_array_equal(got[0].image, got[1].image)
