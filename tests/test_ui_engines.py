"""Engines panel and calibration wizard against a real EngineSlot wired into the live pipeline.

No learned model (models/face_recon.onnx) exists yet, so "face_recon" is served by
a stand-in: the tiny "matmul" ONNX model of avatar_app.inference.tiny_models, run
once per frame on the processing thread through the window's EngineController slot
(ui_fixtures.SlotStandIn), exactly where the learned reconstructor will call it.
Builds run in child processes, as in the app.
"""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.inference import BackendStatus, EngineCache, Precision
from ui_fixtures import SlotStandIn, settings, tiny_model, tiny_sample_fn  # noqa: F401

pytestmark = [pytest.mark.gui, pytest.mark.gl]

VIDEO = "video/grid_s1_bbaf2n.mp4"


@pytest.fixture
def engine_window(qtbot, testdata, settings, tmp_path, monkeypatch):
    from avatar_app.ui.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
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
    qtbot.addWidget(win)
    win.viewport.setFixedSize(640, 360)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: ctl.active("face_recon") is not None and win.pipeline is not None
                    and win.pipeline.frames_processed >= 5, timeout=60000)
    yield win
    win.close()


def _active(win):
    return win.engines.active("face_recon")


def test_precision_switch_keeps_frames_flowing(qtbot, engine_window):
    """FP32 -> INT8 -> FP32 on ONNX Runtime CPU while a file plays: no gap over 200 ms in rendered frames.

    Gaps are measured from each request until 1 s after its engine serves (the
    build runs in a child process meanwhile).
    """
    import time

    win = engine_window
    box = win.engines_panel.boxes["face_recon"]
    presented: list[tuple[float, int]] = []

    stamps: list[dict] = []

    def on_presented(state, t_ns):
        if state is not None and state.stamps and (not presented or presented[-1][1] != state.frame_index):
            presented.append((t_ns / 1e9, state.frame_index))
            stamps.append(dict(state.stamps))

    win.viewport.frame_presented.connect(on_presented)
    box.select("ort_cpu", "fp32")
    qtbot.waitUntil(lambda: not win.engines.pending("face_recon"), timeout=60000)
    assert _active(win).precision is Precision.FP32
    windows = []
    for precision in (Precision.INT8, Precision.FP32):
        qtbot.wait(500)
        t0 = time.perf_counter()
        box.select("ort_cpu", precision.value)
        if precision is Precision.INT8:  # (FP32 on the CPU is the reference: it may open at once)
            assert win.engines.pending("face_recon") and box.progress.isVisible()  # builds in the background
        qtbot.waitUntil(lambda p=precision: _active(win).precision is p and not win.engines.pending("face_recon"),
                        timeout=120000)
        qtbot.wait(1000)
        windows.append((t0, time.perf_counter()))
        if precision is Precision.INT8:
            assert "int8 passed" in box.verification.text(), box.verification.text()
            assert "ONNX Runtime CPU INT8" in win.status_labels["engines"].text()
            assert win.settings.value("studio/EngineChoice", type=str).count("int8") == 1
    win.viewport.frame_presented.disconnect(on_presented)

    stand_in = win.stand_ins[-1]
    assert not stand_in.errors, stand_in.errors[:3]
    assert stand_in.served.get("int8", 0) > 5 and stand_in.served.get("fp32", 0) > 5, stand_in.served
    t = np.array([p[0] for p in presented])
    for t0, t1 in windows:
        inside = t[(t >= t0) & (t <= t1)]
        assert len(inside) > 10, "frames stopped during the switch"
        gaps_ms = np.diff(np.r_[t0, inside, t1]) * 1000
        i = int(np.searchsorted(t, inside[0])) + max(0, int(np.argmax(gaps_ms)) - 1)
        around = [{k: round((e - b) / 1e6, 1) for k, (b, e) in st.items()} for st in stamps[max(0, i - 1): i + 2]]
        assert gaps_ms.max() < 200, (f"rendered frames paused {gaps_ms.max():.0f} ms during a precision switch; "
                                     f"stage ms of the frames around it: {around}")


def test_unavailable_options_are_disabled_with_reasons(qtbot, engine_window):
    from avatar_app.ui.panels import item_enabled

    win = engine_window
    ctl = win.engines
    speech = win.engines_panel.boxes["speech2face"]
    assert not speech.backend.isEnabled() and "Model not installed" in speech.model_label.text()
    assert "loudness solver" in win.status_labels["engines"].text()
    # a machine without a GPU: CUDA cannot run, INT8 impossible on a backend that refuses it
    ctl.statuses["ort_cuda"] = BackendStatus("ort_cuda", True, "1.0", False, False, "no NVIDIA GPU found",
                                             precisions={p: "no NVIDIA GPU found" for p in ("fp32", "fp16", "int8")})
    ctl.statuses["ort_cpu"].precisions["fp16"] = "this CPU build has no float16 kernels (test)"
    win.engines_panel.refresh()
    face = win.engines_panel.boxes["face_recon"]
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
    cal = win.calibration_panel
    store = win.engines.store("face_recon")
    assert store is not None and not store.files()
    # live: the processing thread feeds the collector
    assert cal.start_samples()
    start = win.pipeline.frames_processed
    qtbot.waitUntil(lambda: cal.collector.counts()["face_recon"] >= 5, timeout=20000)
    assert win.pipeline.frames_processed > start
    assert cal.guidance.text()  # a prompt is shown
    # fill the rest quickly with synthetic landmarks (500 live frames would take ~30 s)
    rng = np.random.default_rng(0)
    while cal.collector.counts()["face_recon"] < MIN_USER_SAMPLES:
        cal.collector.add(Landmarks(rng.uniform(0, 1, (478, 3)).astype(np.float32), (640, 480)), None)
    qtbot.waitUntil(lambda: cal.collector is None, timeout=5000)  # stops itself and stores
    assert win._sampler is None
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
