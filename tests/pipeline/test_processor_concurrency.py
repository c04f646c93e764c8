"""FrameProcessor runs speech beside tracking: the same states as the sequential order, errors as before."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from avatar_app.core.blendshapes import NUM_BLENDSHAPES
from avatar_app.core.errors import AvatarError
from avatar_app.core.types import FaceParams, Frame
from avatar_app.pipeline import SPEECH_RATE, FrameProcessor, StageChoice, audio_window, build_stages

STATE_ARRAYS = ("weights", "rotation", "translation", "gaze", "vision_weights", "audio_weights")


def _states(frames, audio, concurrent: bool | None, meanwhile: bool = True, setup=None) -> tuple[list, set[str]]:
    """The states of ``frames`` through the render's stages; and the threads the speech calls ran on.

    ``concurrent`` forces the order (None: "auto"); ``meanwhile=False`` hides the MediaPipe tracker's
    ``runs_meanwhile``, so the worker thread runs speech; ``setup(proc)`` runs before the first frame.
    """
    stages = build_stages(StageChoice(live=False, audio=True, tracker="mediapipe"))
    assert stages.tracker.runs_meanwhile
    stages.tracker.runs_meanwhile = meanwhile
    proc = FrameProcessor(stages.tracker, stages.reconstructor, stages.speech, live=False, chain=stages.chain)
    proc.speech_lookahead_s = stages.speech.offline_lookahead_s
    proc.concurrent_speech = concurrent
    if setup is not None:
        setup(proc)
    threads: set[str] = set()
    process = stages.speech.process

    def spy(*args):
        threads.add(threading.current_thread().name)
        return process(*args)

    stages.speech.process = spy
    out = []
    try:
        for f in frames:
            w = audio_window(audio.samples, SPEECH_RATE, f.media_time_s - audio.media_time_s + proc.speech_lookahead_s,
                             stages.speech.context_s)
            out.append(proc.process(f, w))
    finally:
        proc.close()
        stages.close()
    return out, threads


def _clip(testdata, n: int = 40):
    """The first ``n`` frames of a GRID clip (a face, speech) and its 16 kHz audio."""
    from avatar_app.capture.video_file import VideoFileSource

    with VideoFileSource(testdata / "video" / "grid_s1_bbaf2n.mp4") as src:
        return list(src.frames())[:n], src.read_audio(SPEECH_RATE)


def _assert_same_states(a_states, b_states) -> None:
    for a, b in zip(a_states, b_states, strict=True):
        for name in STATE_ARRAYS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"frame {a.frame_index} {name}")
        assert a.face_found == b.face_found


def test_concurrent_speech_gives_the_sequential_states(testdata):
    """A real clip (sound and a face): every array of every state is bit-identical in the three orders:
    sequential, speech while MediaPipe's threads track (the default), speech on the worker thread."""
    frames, audio = _clip(testdata)
    me = threading.current_thread().name
    seq, seq_threads = _states(frames, audio, concurrent=False)
    meanwhile, meanwhile_threads = _states(frames, audio, concurrent=True)
    worker, worker_threads = _states(frames, audio, concurrent=True, meanwhile=False)
    # the worker ran the calls (the processing thread takes back those it had not started)
    assert seq_threads == meanwhile_threads == {me} and "speech" in worker_threads
    assert any(s.audio_weights.max() > 0.05 for s in seq), "the clip's speech should move the mouth"
    assert sum(s.face_found for s in seq) == len(frames)
    _assert_same_states(seq, meanwhile)
    _assert_same_states(seq, worker)
    for b, c in zip(meanwhile, worker, strict=True):
        assert list(b.stamps)[:3] == list(c.stamps)[:3] == ["track", "reconstruct", "speech"]
        (t0, t1), (s0, s1) = b.stamps["track"], b.stamps["speech"]
        assert t0 < s0 <= s1 < t1  # the speech call ran inside the track stage
        assert 0 < c.stamps["speech"][0] <= c.stamps["speech"][1]


def test_the_tracker_calls_meanwhile_once_per_frame_during_its_graph(testdata):
    """FaceTracker hands ``meanwhile`` to the frame's first graph run: called once per frame (detection
    frames too), the landmarks unchanged; a call that raises before tracking does not call it."""
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.core.errors import TrackingError
    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    with VideoFileSource(testdata / "video" / "grid_s1_bbaf2n.mp4") as src:
        frames = list(src.frames())[:30]
    calls: list[int] = []
    with FaceTracker(RunningMode.VIDEO, redetect_s=0.2) as a, FaceTracker(RunningMode.VIDEO, redetect_s=0.2) as b:
        for f in frames:
            ts = f.media_time_s * 1000.0
            plain = a.process_video_frame(f.image, ts)
            got = b.process_video_frame(f.image, ts, meanwhile=lambda i=f.index: calls.append(i))
            assert (plain is None) == (got is None)
            if plain is not None:
                np.testing.assert_array_equal(plain.points, got.points)
        assert calls == [f.index for f in frames]
        with pytest.raises(TrackingError):
            b.process_video_frame(frames[0].image, 0.0, meanwhile=lambda: calls.append(-1))
    assert -1 not in calls


class _Tracker:
    """A tracker that finds no face, or raises when ``fail`` is set; it first waits (2 s at most)
    until the frame's speech call has started, so the worker runs it."""

    def __init__(self, speech):
        self.fail = False
        self.speech = speech

    def process_video_frame(self, image, t_ms):
        self.speech.started.wait(2.0)
        self.speech.started.clear()
        if self.fail:
            raise AvatarError("tracker broke")
        return None


class _Speech:
    """A speech animator that returns its call count, or raises when ``fail`` is set; records its calls."""

    def __init__(self, delay_s: float = 0.0):
        self.fail = False
        self.calls: list[tuple[float, str]] = []
        self.done: list[float] = []
        self.delay_s = delay_s
        self.started = threading.Event()

    def process(self, window, t_s):
        self.calls.append((t_s, threading.current_thread().name))
        self.started.set()
        time.sleep(self.delay_s)
        self.done.append(t_s)
        if self.fail:
            raise AvatarError("speech broke")
        return np.full(NUM_BLENDSHAPES, len(self.calls) / 100.0, np.float32)


def _frame(i: int) -> Frame:
    return Frame(index=i, t_capture_ns=i + 1, image=np.zeros((8, 8, 3), np.uint8), media_time_s=i * 0.04)


def _processor(speech) -> FrameProcessor:
    proc = FrameProcessor(_Tracker(speech), reconstructor=None, speech=speech, live=False)
    proc.concurrent_speech = True  # the overlap itself, whatever this machine's CPU count makes the default
    return proc


def test_speech_errors_and_vision_errors_propagate():
    """The speech stage's AvatarError reaches the caller; a vision error waits for the frame's speech call."""
    speech = _Speech(delay_s=0.02)
    proc = _processor(speech)
    window = np.zeros(1600, np.float32)
    try:
        speech.fail = True
        with pytest.raises(AvatarError, match="speech broke"):
            proc.process(_frame(0), window)
        speech.fail = False
        proc.tracker.fail = True
        with pytest.raises(AvatarError, match="tracker broke"):
            proc.process(_frame(1), window)
        assert speech.done == [0.0, 0.04]  # the call had ended when the error was raised
        proc.tracker.fail = False
        state = proc.process(_frame(2), window)
        assert state.audio_weights[0] == pytest.approx(0.03)
    finally:
        proc.close()


def test_engine_swap_between_frames_and_no_overlap_without_tracking():
    """A speech animator replaced between frames serves the next frame; demo vision runs speech inline."""
    first, second = _Speech(), _Speech()
    proc = _processor(first)
    window = np.zeros(1600, np.float32)
    try:
        proc.process(_frame(0), window)
        proc.speech = proc.tracker.speech = second
        proc.process(_frame(1), window)
        assert [t for t, _ in first.calls] == [0.0] and [t for t, _ in second.calls] == [0.04]
        assert first.calls[0][1] == "speech"
        vision = FaceParams(blendshapes=np.zeros(NUM_BLENDSHAPES, np.float32))
        proc.process(_frame(2), window, vision=vision)
        assert second.calls[-1][1] == threading.current_thread().name
    finally:
        proc.close()


def test_the_speech_thread_ends_when_idle_or_closed_and_comes_back():
    """No thread is left behind: close ends it, so does a pause; the next frame starts a new one."""
    def speech_threads():
        return [t for t in threading.enumerate() if t.name == "speech" and t.is_alive()]

    def wait_gone():
        deadline = time.monotonic() + 5.0
        while speech_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not speech_threads()

    speech = _Speech()
    proc = _processor(speech)
    window = np.zeros(1600, np.float32)
    before = speech_threads()
    proc.process(_frame(0), window)
    assert len(speech_threads()) == len(before) + 1
    proc.close()
    assert wait_gone()
    proc._worker.idle_s = 0.05
    proc.process(_frame(1), window)
    assert wait_gone()
    proc.process(_frame(2), window)
    assert [name for _, name in speech.calls] == ["speech"] * 3
    proc.close()
    proc.close()
    assert wait_gone()


def test_a_job_the_worker_did_not_start_runs_on_the_processing_thread(monkeypatch):
    """A worker that never gets to run (a busy machine) costs the frame nothing: the caller takes the call back."""
    speech = _Speech()
    proc = _processor(speech)
    monkeypatch.setattr(proc.tracker, "process_video_frame", lambda image, t_ms: None)  # no waiting
    monkeypatch.setattr(proc._worker, "submit", lambda job: None)  # handed over, never started
    state = proc.process(_frame(0), np.zeros(1600, np.float32))
    assert speech.calls == [(0.0, threading.current_thread().name)]
    assert state.audio_weights[0] == pytest.approx(0.01) and "speech" in state.stamps
    speech.fail = True
    with pytest.raises(AvatarError, match="speech broke"):
        proc.process(_frame(1), np.zeros(1600, np.float32))


def test_speech_overlaps_tracking_by_default_only_with_a_cpu_to_spare(monkeypatch):
    """MediaPipe's graph keeps ~2 cores busy: on fewer than 4 CPUs the stages run one after the other."""
    import os

    from avatar_app.pipeline import processor as P

    assert not P.speech_overlap_default(2) and not P.speech_overlap_default(3)
    assert P.speech_overlap_default(4) and P.speech_overlap_default(16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert FrameProcessor(None, None).concurrent_speech is False
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert FrameProcessor(None, None).concurrent_speech is True


class _OrderClock:
    """An injected clock: each reading advances by the cost of the order the processor ran last
    (``costs[phase][overlapped]`` ns, the phase flipping after ``flip_after`` frames), so a frame
    measures as the cost of its own order and no wall time enters the test."""

    def __init__(self, costs, flip_after: int):
        self.costs, self.flip_after = costs, flip_after
        self.proc = None
        self.t = self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        done = sum(self.proc.order_chooser.frames.values()) if self.proc else 0
        phase = int(done >= self.flip_after)
        overlapped = bool(self.proc and self.proc.last_overlapped)
        self.t += self.costs[phase][overlapped]
        return self.t


def test_the_adaptive_order_switches_mid_clip_and_the_states_stay_the_sequential_ones(testdata):
    """A real clip with injected frame costs (overlap cheaper, then dearer): "auto" switches to the
    overlap and back, both orders run, and every state is bit-identical to the forced sequential run's."""
    from avatar_app.pipeline.processor import OrderChooser

    frames, audio = _clip(testdata, 48)
    clock = _OrderClock(costs=[{True: 4_000_000, False: 5_000_000}, {True: 6_000_000, False: 5_000_000}],
                        flip_after=24)

    def adaptive(proc):
        clock.proc = proc
        proc.order_chooser = OrderChooser(False, clock=clock, probe_frames=3, interval_s=0.0, interval_frames=0,
                                          confirm=1, warmup_frames=2)

    seq, _ = _states(frames, audio, concurrent=False)
    auto, _ = _states(frames, audio, concurrent=None, setup=adaptive)
    chooser = clock.proc.order_chooser
    assert chooser.switches >= 2 and not chooser.overlapped  # sequential, overlapped, sequential again
    assert chooser.frames["overlapped"] > 0 and chooser.frames["sequential"] > 0
    assert sum(chooser.frames.values()) == len(frames)
    _assert_same_states(seq, auto)


def _feed(chooser, costs_ms, n: int, clock=None, step_ns: int = 0) -> list[bool]:
    """Run ``n`` frames through ``chooser``; costs_ms[overlapped] is each frame's cost (a value or a
    callable of the frame number); the injected clock advances ``step_ns`` per frame. Orders run."""
    ran = []
    for i in range(n):
        o = chooser.next_order()
        c = costs_ms[o](i) if callable(costs_ms[o]) else costs_ms[o]
        if clock is not None:
            clock[0] += step_ns
        chooser.record(o, int(c * 1e6))
        ran.append(o)
    return ran


def test_the_chooser_keeps_the_faster_order_by_median_with_hysteresis():
    """Injected timings: the faster order becomes home after two probes, and stays; an order only
    2 % faster (inside the 3 % margin) or one whose probes scatter +-8 % around the home order's cost
    never takes over; probes wait ``interval_s`` of the injected clock and ``interval_frames`` frames
    once the first two are in."""
    from avatar_app.pipeline.processor import OrderChooser

    t = [0]
    ch = OrderChooser(False, clock=lambda: t[0], probe_frames=5, interval_s=1.0, interval_frames=0, warmup_frames=3)
    ran = _feed(ch, {True: 4.0, False: 5.0}, 30, t, 40_000_000)  # 25 fps
    assert ch.overlapped and ch.switches == 1 and ch.last_probe_ms == (5.0, 4.0)
    first_overlapped = ran.index(True)
    assert ran[:first_overlapped] == [False] * first_overlapped and first_overlapped == 3 + 5  # warm-up, window
    ran = _feed(ch, {True: 4.0, False: 5.0}, 500, t, 40_000_000)
    assert ch.overlapped and ch.switches == 1 and ch.probes >= 5
    assert 0 < ran.count(False) <= 0.25 * len(ran)  # probes only: 5 frames after each 1 s (25 frames)
    ch.interval_frames = 95  # frames that come slowly: a probe after 1 s and 95 frames, whichever is later
    before = ch.probes
    ran = _feed(ch, {True: 4.0, False: 5.0}, 1000, t, 40_000_000)
    assert ch.probes - before in (9, 10) and ran.count(False) <= 0.05 * len(ran)
    # an unsure estimate (orders 4 % apart, twice the margin is 6 %): probes UNSURE_PROBE_DIVISOR times as often
    before = ch.probes
    _feed(ch, {True: 4.0, False: 4.16}, 1000, t, 40_000_000)
    assert ch.overlapped and ch.probes - before >= 18  # against 9 or 10 above, once the older ratios aged out

    ch = OrderChooser(True, clock=lambda: t[0], probe_frames=5, interval_s=0.0, interval_frames=0, warmup_frames=0)
    _feed(ch, {True: 5.0, False: 4.9}, 400, t)
    assert ch.overlapped and ch.switches == 0 and ch.probes > 10

    # noise: the other order wins every other probe by 8 %, loses the next by 8 %: no switch
    ch = OrderChooser(True, clock=lambda: t[0], probe_frames=5, interval_s=0.0, interval_frames=0, warmup_frames=0)
    _feed(ch, {True: 5.0, False: lambda i: 4.6 if (i // 10) % 2 else 5.4}, 400, t)
    assert ch.overlapped and ch.switches == 0 and ch.probes > 10

    # a median, not a mean: one slow frame in the probe does not hide that the order is faster
    ch = OrderChooser(True, clock=lambda: t[0], probe_frames=5, interval_s=0.0, interval_frames=0, warmup_frames=0)
    _feed(ch, {True: 5.0, False: lambda i: 50.0 if i % 5 == 0 else 4.0}, 60, t)
    assert not ch.overlapped and ch.switches == 1
    assert ch.describe()["home"] == "sequential" and ch.describe()["switches"] == 1
    ch.restart()  # a new tracker: measured afresh, from the same home order, after a new warm-up
    assert ch.estimate() is None and not ch.overlapped and ch.next_order() is False
    _feed(ch, {True: 4.0, False: 5.0}, 40, t)
    assert ch.overlapped and ch.switches == 2


def test_the_default_probes_stay_out_of_the_95th_percentile():
    """The defaults at 25 fps, the overlap 13 % faster (as measured on 2 cores alone): the overlap is
    home after the two confirming probes, within 1.5 s; then the slower order runs on under 5 % of the
    frames of a 27 s clip (its first 10 frames left out, as benchmarks/peers.py does) and under 2 %
    over 10 minutes, so its frames cannot make the 95th percentile of the frame time; a later load
    that makes the overlap slower still turns the order, and a first call left unsure is soon
    corrected."""
    from avatar_app.pipeline.processor import OrderChooser

    t = [0]
    ch = OrderChooser(False, clock=lambda: t[0])
    ran = _feed(ch, {True: 4.35, False: 5.0}, 675, t, 40_000_000)
    assert ch.overlapped and ch.switches == 1 and ran.index(True) < 37
    assert ran[37:].count(True) > 0 and ran[10:].count(False) <= 0.05 * len(ran[10:])
    ran = _feed(ch, {True: 4.35, False: 5.0}, 15_000, t, 40_000_000)
    assert ch.switches == 1 and 0 < ran.count(False) <= 0.02 * len(ran)
    ran = _feed(ch, {True: 6.0, False: 5.0}, 3_000, t, 40_000_000)  # 2 minutes of another load
    assert not ch.overlapped and ch.switches == 2

    # a first call made under a passing load (both orders alike for the first 2 s: unsure, stays
    # sequential) is corrected within 4 s of the load passing
    t = [0]
    ch = OrderChooser(False, clock=lambda: t[0])
    ran = _feed(ch, {True: 5.0, False: 5.0}, 50, t, 40_000_000)
    assert not ch.overlapped and ch.probes == 2
    ran = _feed(ch, {True: 4.35, False: 5.0}, 100, t, 40_000_000)
    assert ch.overlapped and ch.switches == 1


def test_the_order_can_be_forced_by_argument_attribute_or_environment(monkeypatch):
    """"overlapped"/"sequential" force the order (nothing measured), "auto" asks the chooser; the
    environment variable applies where no argument is given; a wrong value is an InputError."""
    from avatar_app.core.errors import InputError
    from avatar_app.pipeline import processor as P

    monkeypatch.delenv(P.SPEECH_ORDER_ENV, raising=False)
    assert FrameProcessor(None, None).speech_order == "auto"
    monkeypatch.setenv(P.SPEECH_ORDER_ENV, "Overlapped")
    proc = FrameProcessor(None, None)
    assert proc.speech_order == "overlapped" and proc.concurrent_speech is True
    assert FrameProcessor(None, None, speech_order="sequential").concurrent_speech is False
    proc.concurrent_speech = None
    assert proc.speech_order == "auto" and proc.concurrent_speech == proc.order_chooser.next_order()
    proc.concurrent_speech = False
    assert proc.speech_order == "sequential"
    monkeypatch.setenv(P.SPEECH_ORDER_ENV, "fastest")
    with pytest.raises(InputError, match=P.SPEECH_ORDER_ENV):
        FrameProcessor(None, None)
    with pytest.raises(InputError, match="speech order"):
        proc.speech_order = "both"
    monkeypatch.delenv(P.SPEECH_ORDER_ENV)

    # forced: frames are not measured; auto: each frame with speech beside tracking is
    speech = _Speech()
    proc = _processor(speech)
    monkeypatch.setattr(proc.tracker, "process_video_frame", lambda image, t_ms: None)
    try:
        proc.process(_frame(0), np.zeros(1600, np.float32))
        assert sum(proc.order_chooser.frames.values()) == 0 and proc.last_overlapped is True
        proc.speech_order = "auto"
        proc.process(_frame(1), np.zeros(1600, np.float32))
        assert sum(proc.order_chooser.frames.values()) == 1
        proc.process(_frame(2), None)  # no audio: no speech call, nothing to choose
        assert sum(proc.order_chooser.frames.values()) == 1
    finally:
        proc.close()
