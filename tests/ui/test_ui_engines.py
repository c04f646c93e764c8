"""Engines panel and calibration wizard against real EngineSlots wired into the live pipeline.

The precision switch runs the shipped speech engine (models/speech2face.onnx): it
serves every frame while a file with audio plays (EngineSpeechAnimator on the
controller's "speech2face" slot). The other tests use a stand-in for "face_recon"
(the tiny "matmul" ONNX model of avatar_app.inference.tiny_models, run once per
frame on the processing thread through the window's slot, ui_helpers.SlotStandIn),
so they do not depend on the face model being trained. Builds run in child
processes, as in the app.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
from ui_helpers import (
    ServedCounter,
    SlotStandIn,
    qimage_to_array,
    show_running,
    tiny_model,
    tiny_sample_fn,
)

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.inference import BackendStatus, EngineCache, Precision

pytestmark = [pytest.mark.gui, pytest.mark.gl]
log = logging.getLogger(__name__)

VIDEO = "video/grid_s1_bbaf2n.mp4"
#: Length of the clip (it plays in a loop), s.
CLIP_S = 3.0


def _isolated_dirs(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def engine_window(qtbot, testdata, settings, tmp_path, monkeypatch):
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    _isolated_dirs(monkeypatch, tmp_path)
    model = tiny_model(tmp_path / "models")
    ctl = EngineController(models={"face_recon": model, "speech2face": None}, isolate=True,
                           cache=EngineCache(tmp_path / "cache"), calibration_root=tmp_path / "calib",
                           sample_fns={"face_recon": tiny_sample_fn})
    stand_ins = []

    def factory(engines):
        stand_ins.append(SlotStandIn(engines))
        return stand_ins[-1]

    win = MainWindow(source=testdata / VIDEO, settings=settings, engines=ctl, reconstructor_factory=factory)
    win.stand_ins = stand_ins
    show_running(qtbot, win, ready=lambda: ctl.active("face_recon") is not None, timeout_ms=60000)
    yield win
    win.close()


@pytest.fixture
def speech_window(qtbot, testdata, settings, tmp_path, monkeypatch):
    """The studio window playing the GRID clip with the shipped speech engine (face engine off).

    ``win.speech_counter`` (ServedCounter) counts the speech engine's calls per precision.
    """
    from avatar_app.pipeline.engines import EngineController, default_model_path
    from avatar_app.pipeline.stages import StageChoice, build_speech
    from avatar_app.ui.main_window import MainWindow

    _isolated_dirs(monkeypatch, tmp_path)
    model = default_model_path("speech2face")
    assert model.is_file(), f"the shipped speech model is missing: {model}"
    ctl = EngineController(models={"face_recon": None, "speech2face": model}, isolate=True,
                           cache=EngineCache(tmp_path / "cache"), calibration_root=tmp_path / "calib")
    counter = ServedCounter("blendshapes")

    def speech_factory(engines):
        slot = engines.slot("speech2face")
        if slot is None:
            return None  # the stage factory's loudness solver until the slot is open
        animator = build_speech(StageChoice(live=True, slots={"speech2face": slot}))  # the app's own factory
        counter.attach(animator.slot)
        return animator

    win = MainWindow(source=testdata / VIDEO, settings=settings, engines=ctl, speech_factory=speech_factory)
    win.speech_counter = counter
    show_running(qtbot, win, ready=lambda: ctl.active("speech2face") is not None
                 and counter.served.get("fp32", 0) >= 5, timeout_ms=60000)
    yield win
    win.close()


def _active(win, name="face_recon"):
    return win.session.engines.active(name)


def _save_screenshot(widget, name: str, folder: Path) -> Path:
    """Write ``widget`` as PNG into $AVATAR_SCREENSHOTS (if set) or ``folder``."""
    import cv2

    d = Path(os.environ.get("AVATAR_SCREENSHOTS") or folder)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.png"
    cv2.imwrite(str(path), qimage_to_array(widget.grab().toImage())[:, :, ::-1])
    return path


def _fully_visible(label) -> bool:
    """Whether a word-wrapped QLabel shows all of its text: tall enough and not cut by a parent."""
    need = label.heightForWidth(label.width())
    return label.height() >= need and label.visibleRegion().boundingRect() == label.rect()


def _gap_report(t: np.ndarray, stamps: list[dict], t0: float, t1: float) -> tuple[float, float, list]:
    """Longest pause between rendered frames in [t0, t1] (the window's edges count as frames).

    Returns:
        (pause in ms, its start as a ``time.perf_counter()`` value, the stage durations in
        ms of the frames around it).
    """
    inside = np.nonzero((t >= t0) & (t <= t1))[0]
    assert len(inside) > 5, f"no frames rendered in a {t1 - t0:.1f} s window of a precision switch"
    edges = np.r_[t0, t[inside], t1]
    gaps_ms = np.diff(edges) * 1000
    k = int(np.argmax(gaps_ms))
    i = inside[0] + max(0, k - 1)
    around = [{n: round((e - b) / 1e6, 1) for n, (b, e) in st.items()} for st in stamps[max(0, i - 1): i + 2]]
    return float(gaps_ms[k]), edges[k], around


def _jaw_moves(rows: list[np.ndarray]) -> bool:
    """Whether jawOpen spans more than 0.1 over ``rows`` (each (C,) float32 blendshape weights)."""
    jaw = BLENDSHAPE_NAMES.index("jawOpen")
    return len(rows) > 1 and float(np.ptp(np.array(rows)[:, jaw])) > 0.1


def test_precision_switch_keeps_frames_flowing(qtbot, speech_window, tmp_path, request):
    """FP32 -> INT8 -> FP32 of the shipped speech engine on ONNX Runtime CPU while a file plays.

    Through the Engines panel's controls: the serving engine's precision really
    changes; the INT8 engine passed verification and the panel shows it, unclipped;
    the speech engine serves every frame throughout (fp32, int8, fp32 in that order,
    never interleaved, never an error) and its weights move with the speech at
    every precision; frames keep being rendered.

    Frames keep being rendered through a background build: each third of a build
    that lasts 6 s or more holds a rendered frame (a build or swap that blocked the
    processing or GUI thread would pause rendering for the whole build), which
    counts frames and does not depend on how busy the machine is. The longest
    pause is a wall-clock figure and is recorded, not asserted (user property and
    log line max_gap_ms_<precision>); benchmarks/gui_watchdog.py asserts the
    issue's 200 ms bar on a quiet machine.
    """
    win = speech_window
    ctl, counter = win.session.engines, win.speech_counter
    box = win.panels["engines"].boxes["speech2face"]
    slot = ctl.slot("speech2face")
    assert win.session.pipeline.processor.speech.slot is slot  # the learned animator, not the loudness solver
    presented: list[float] = []
    stamps: list[dict] = []
    last_index = [-1]

    def on_presented(state, t_ns):
        if state is not None and state.stamps and state.frame_index != last_index[0]:
            last_index[0] = state.frame_index
            presented.append(time.perf_counter())
            stamps.append(dict(state.stamps))

    win.viewport.frame_presented.connect(on_presented)
    box.select("ort_cpu", "fp32")
    qtbot.waitUntil(lambda: not ctl.pending("speech2face"), timeout=60000)
    assert _active(win, "speech2face").precision is Precision.FP32
    assert "reference engine" in box.verification.text(), box.verification.text()
    bench = os.environ.get("AVATAR_APP_SWITCH_JSON")  # benchmarks/gui_watchdog.py: the 200 ms bar
    switches = []  # (precision, t_request, t_served, t_end): t_end ends the window the pause is looked for in
    shot = None
    for precision in (Precision.INT8, Precision.FP32):
        before = sum(counter.served.values())
        qtbot.waitUntil(lambda b=before: sum(counter.served.values()) >= b + 5, timeout=30000)  # serving before
        t_request = time.perf_counter()
        box.select("ort_cpu", precision.value)
        if precision is Precision.INT8:  # (FP32 on the CPU is the reference: it may open at once)
            assert ctl.pending("speech2face") and box.progress.isVisible()  # builds in the background
            assert "FP32" in box.serving.text()  # ... while FP32 keeps serving
        qtbot.waitUntil(lambda p=precision: _active(win, "speech2face").precision is p
                        and not ctl.pending("speech2face"), timeout=120000)
        t_served = time.perf_counter()
        # the benchmark looks for pauses up to 1 s after the swap; the suite, up to 6 frames rendered and 6
        # calls served after it (frames, not time: a loaded machine renders fewer per second)
        if bench:
            qtbot.wait(1000)
        after = counter.runs[-1][1] if counter.sequence()[-1] == precision.value else 0
        qtbot.waitUntil(lambda a=after, p=precision.value: sum(x > t_served for x in presented) >= 6
                        and counter.runs[-1][0] == p and counter.runs[-1][1] >= a + 6, timeout=30000)
        switches.append((precision.value, t_request, t_served, t_served + 1.0 if bench else time.perf_counter()))
        if precision is Precision.INT8:
            assert _active(win, "speech2face").verification.passed
            assert "int8 passed" in box.verification.text(), box.verification.text()
            assert "ONNX Runtime CPU INT8" in box.serving.text()
            assert "Speech: ONNX Runtime CPU INT8" in win.status_labels["engines"].text()
            assert win.settings.value("studio/EngineChoice", type=str).count("int8") == 1
            win.docks["engines"].raise_()
            qtbot.wait(100)
            assert _fully_visible(box.verification), (box.verification.text(), box.verification.geometry())
            shot = _save_screenshot(win.docks["engines"], "engines_panel_speech_int8", tmp_path)
            win.docks["sources"].raise_()
            # INT8 serves until the mouth moved with the speech (the checks below), not a fixed time
            qtbot.waitUntil(lambda: counter.served["int8"] > 20 and _jaw_moves(counter.last_rows["int8"]),
                            timeout=int(CLIP_S * 1000) + 30000)
    win.viewport.frame_presented.disconnect(on_presented)

    assert shot is not None and shot.is_file()
    assert not counter.errors, counter.errors[:3]
    assert counter.sequence() == ["fp32", "int8", "fp32"], counter.runs
    assert counter.served["int8"] > 20 and counter.runs[-1][1] > 5, counter.runs
    assert win.session.pipeline.processor.speech.slot is slot  # the same animator served all along
    jaw = BLENDSHAPE_NAMES.index("jawOpen")
    for p, rows in counter.last_rows.items():  # the mouth moves with the speech at every precision
        w = np.array(rows)
        assert np.isfinite(w).all() and np.ptp(w[:, jaw]) > 0.1, (p, np.ptp(w[:, jaw]))
    t = np.array(presented)
    figures = {}
    for precision, t_request, t_served, t_end in switches:
        gap, where, around = _gap_report(t, stamps, t_request, t_end)
        request.node.user_properties.append((f"max_gap_ms_{precision}", round(gap, 1)))
        figures[precision] = {"max_gap_ms": gap, "served_after_s": t_served - t_request, "around": around}
        log.info("longest rendered-frame pause during the switch to %s: %.0f ms", precision, gap)
        if t_served - t_request >= 6.0:  # a background build: frames kept coming in every third of it
            thirds = np.histogram(t, bins=np.linspace(t_request, t_served, 4))[0]
            assert (thirds > 0).all(), (f"no frame was rendered in part of the build of {precision} "
                                        f"(frames per third {thirds.tolist()}, served at {t_served - t_request:.2f} s; "
                                        f"longest pause {gap:.0f} ms at {where - t_request:.2f} s: {around})")
    if bench:  # the bar as stated, asserted only by the benchmark (quiet machine)
        Path(bench).write_text(json.dumps({"switches": figures, "loadavg_1min": os.getloadavg()[0]},
                                          indent=1, default=str) + "\n")
        worst = max(figures, key=lambda p: figures[p]["max_gap_ms"])
        assert figures[worst]["max_gap_ms"] < 200, (f"rendering paused {figures[worst]['max_gap_ms']:.0f} ms "
                                                    f"during the switch to {worst}: {figures[worst]['around']}")


def test_unavailable_options_are_disabled_with_reasons(qtbot, engine_window):
    from avatar_app.ui.panels import item_enabled

    win = engine_window
    ctl = win.session.engines
    speech = win.panels["engines"].boxes["speech2face"]
    assert not speech.backend.isEnabled() and "Model not installed" in speech.model_label.text()
    assert "loudness solver" in win.status_labels["engines"].text()
    # a machine without a GPU: CUDA cannot run, INT8 impossible on a backend that refuses it
    ctl.statuses["ort_cuda"] = BackendStatus("ort_cuda", True, "1.0", False, False, "no NVIDIA GPU found",
                                             precisions={p: "no NVIDIA GPU found" for p in ("fp32", "fp16", "int8")})
    ctl.statuses["ort_cpu"].precisions["fp16"] = "this CPU build has no float16 kernels (test)"
    win.panels["engines"].refresh()
    face = win.panels["engines"].boxes["face_recon"]
    i = face.backend.findData("ort_cuda")
    assert not item_enabled(face.backend, i)
    assert face.backend.model().item(i).toolTip() == "no NVIDIA GPU found"
    assert item_enabled(face.backend, face.backend.findData("ort_cpu"))
    face.backend.setCurrentIndex(face.backend.findData("ort_cpu"))
    face.refresh()
    opts = face.enabled_options()
    assert "fp16" not in opts["precisions"] and {"fp32", "int8"} <= set(opts["precisions"])
    j = face.precision.findData("fp16")
    assert "float16" in face.precision.model().item(j).toolTip()


def test_calibration_wizard_records_builds_int8_and_deletes(qtbot, engine_window):
    from avatar_app.core.types import Landmarks
    from avatar_app.inference import MIN_USER_SAMPLES

    win = engine_window
    cal = win.panels["calibration"]
    store = win.session.engines.store("face_recon")
    assert store is not None and not store.files()
    # live: the processing thread feeds the collector
    assert cal.start_samples()
    start = win.session.pipeline.frames_processed
    qtbot.waitUntil(lambda: cal.collector.counts()["face_recon"] >= 5, timeout=20000)
    assert win.session.pipeline.frames_processed > start
    assert cal.guidance.text()  # a prompt is shown
    # fill the rest quickly with synthetic landmarks (500 live frames would take ~30 s)
    rng = np.random.default_rng(0)
    while cal.collector.counts()["face_recon"] < MIN_USER_SAMPLES:
        cal.collector.add(Landmarks(rng.uniform(0, 1, (478, 3)).astype(np.float32), (640, 480)), None)
    qtbot.waitUntil(lambda: cal.collector is None, timeout=30000)  # stops itself and stores
    assert win.session.outputs.sampler is None
    files = store.files()
    assert len(files) == 1 and np.load(files[0])["x"].shape == (MIN_USER_SAMPLES, 32)
    assert "1 file(s)" in cal.stored_label.text()

    futures = cal.build_int8()
    assert "face_recon" in futures
    res = futures["face_recon"].result(timeout=120)
    assert res.runner.precision is Precision.INT8 and res.runner.verification.passed
    qtbot.waitUntil(lambda: "INT8 in use" in cal.build_label.text(), timeout=10000)
    assert _active(win).precision is Precision.INT8 and "int8 passed" in cal.build_label.text()

    assert cal.delete_recordings() == 1
    assert not store.files() and "Deleted 1 file(s)" in cal.stored_label.text()
