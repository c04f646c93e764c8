"""The window's live path: the tracker's threads keep the pipeline's priority; the view's render size (issue 18)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

import pytest

from avatar_app.ui import priority

pytestmark = pytest.mark.skipif(not priority.supported(), reason="per-thread nice values need Linux /proc")


def _named_thread(kernel_name: str, ready: threading.Event, done: threading.Event, out: dict):
    """A thread whose kernel name (comm) is ``kernel_name``, as MediaPipe names its workers."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def run():
        libc.prctl(15, kernel_name.encode(), 0, 0, 0)  # PR_SET_NAME (man 2 prctl)
        out["tid"] = threading.get_native_id()
        ready.set()
        done.wait(10)

    t = threading.Thread(target=run, name=f"test-{kernel_name}")
    t.start()
    return t


def test_sweep_keeps_tracker_threads_at_the_tracker_priority(monkeypatch):
    base = os.getpriority(os.PRIO_PROCESS, 0)  # new threads start here (the suite may run under nice)
    if base > 16:
        pytest.skip(f"this process runs at nice {base}: no room for three lower priorities")
    tracker, python, worker = base + 1, base + 2, base + 3
    monkeypatch.setattr(priority, "TRACKER_NICE", tracker)
    prio = priority.ThreadPriorities(nice=worker, python_nice=python)
    prio.keep(prio.threads())  # leave the test process's other threads alone
    done = threading.Event()
    threads, ids = [], {}
    for name in ("mediapipe/7", "mediapipe_gl_ru", "some-worker"):
        ready, out = threading.Event(), {}
        threads.append(_named_thread(name, ready, done, out))
        assert ready.wait(10)
        ids[name] = out["tid"]
    try:
        assert prio.sweep() == 3
        got = {name: priority.thread_nice(tid) for name, tid in ids.items()}
        # MediaPipe's workers: the tracker's priority, not the native workers'; other Python threads: theirs
        assert got == {"mediapipe/7": tracker, "mediapipe_gl_ru": tracker, "some-worker": python}, got
        assert priority.thread_nice() == base  # the sweeping (GUI) thread keeps its priority
    finally:
        done.set()
        for t in threads:
            t.join(10)


def test_view_renders_at_most_the_capped_pixel_ratio():
    """HiDPI: the live view renders logical pixels x VIEW_MAX_DPR at most; Qt scales the rest on paint."""
    from avatar_app.ui.viewport import view_render_size

    assert view_render_size(658, 593, 1.0, max_ratio=1.0) == (658, 593, 1.0)
    assert view_render_size(658, 593, 2.0, max_ratio=1.0) == (658, 593, 1.0)  # a quarter of the device pixels
    assert view_render_size(658, 593, 2.0, max_ratio=2.0) == (1316, 1186, 2.0)
    assert view_render_size(658, 593, 1.5, max_ratio=2.0) == (987, 890, 1.5)
    assert view_render_size(0, 0, 1.0) == (1, 1, 1.0)
