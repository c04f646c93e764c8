"""face_recon on fresh render-and-track data: the face model rendered, tracked by MediaPipe, reconstructed.

A new seed (3) and new subjects: neither the training (seed 1) nor the card's
held-out set (seed 2). 12 subjects x 6 frames plus their neutral renders: the guards compare the
engine with the constant predictor and with alignment alone on the same frames, a ratio that 12
subjects already read within a few hundredths of 24 (MAE ratio 0.59 vs 0.55, rotation 2.88 deg vs
2.89 deg against 6.68 / 6.52 deg, 68 of 72 frames tracked vs 139 of 144), at half the rendering.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.resources import resource_path

pytestmark = [pytest.mark.gl, pytest.mark.slow]
MODEL = resource_path("models/face_recon.onnx")
SUBJECTS, FRAMES = 12, 6


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    from avatar_app.inference import EngineCache, EngineManager
    from avatar_app.reconstruction.engine import EngineReconstructor
    from training.face_recon.evaluate import render_track_figures
    from training.face_recon.make_data import render_track_set

    path = tmp_path_factory.mktemp("rt") / "rt.npz"
    render_track_set(3, SUBJECTS, FRAMES, path)
    card = json.loads(MODEL.with_name("face_recon.card.json").read_text())
    const = np.array([card["constant_predictor"][k] for k in BLENDSHAPE_NAMES])
    mgr = EngineManager(cache=EngineCache(tmp_path_factory.mktemp("engines")), isolate=False)
    engine = EngineReconstructor(MODEL, manager=mgr, backend="ort_cpu", precision="fp32")
    try:
        f = render_track_figures(engine, path, const)
    finally:
        engine.close()
    m = dict(f, rot_deg=f["rotation_err_deg_median"], rot0_deg=f["alignment_only_rotation_err_deg_median"])
    print(f"\nrender and track: MAE {m['mae']:.4f} (constant {m['const_mae']:.4f}, ratio {m['ratio']:.2f}), "
          f"rotation {m['rot_deg']:.2f} deg median (alignment alone {m['rot0_deg']:.2f}), {m['frames']} frames")
    return m


def test_enough_frames_tracked(figures):
    assert figures["frames"] >= 0.8 * SUBJECTS * FRAMES


def test_engine_beats_the_constant_predictor_and_keeps_the_alignments_pose(figures):
    """What the shipped model measurably does on the face model's own renders (a regression guard):
    better than the constant predictor, and no worse than the alignment alone on the head pose."""
    assert figures["mae"] < figures["const_mae"]
    assert figures["rot_deg"] <= figures["rot0_deg"]


@pytest.mark.xfail(strict=True, reason="not met by the shipped model (the ensemble student, trained on real faces "
                   "and the synthetic set, not on renders): MAE 0.0845 against the constant's 0.0880 (ratio 0.96), "
                   "rotation 6.5 deg against the alignment's 6.7; the model before it, trained on these renders: "
                   "0.0525 (0.57) and 3.1 deg. Its real-face figures are what ships it (models/face_recon.md)")
def test_engine_beats_the_constant_predictor_by_30_percent_and_refines_the_pose(figures):
    assert figures["mae"] <= 0.7 * figures["const_mae"]
    assert figures["rot_deg"] < 0.7 * figures["rot0_deg"]


@pytest.mark.xfail(strict=True, reason="issue bar (retired by issue 17) not met by the shipped model: "
                   "render-and-track MAE 0.0845, ratio 0.96, rotation 6.5 deg (models/face_recon.md)")
def test_issue_bars_on_render_and_track(figures):
    assert figures["mae"] <= 0.03
    assert figures["mae"] <= 0.5 * figures["const_mae"]
    assert figures["rot_deg"] <= 1.5
