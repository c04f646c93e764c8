"""face_recon on fresh render-and-track data: the face model rendered, tracked by MediaPipe, reconstructed.

A new seed (3) and new subjects: neither the training (seed 1) nor the card's
held-out set (seed 2). 24 subjects x 6 frames plus their neutral renders.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.reconstruction import normalise as N
from avatar_app.resources import resource_path

pytestmark = [pytest.mark.gl, pytest.mark.slow]
MODEL = resource_path("models/face_recon.onnx")


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    import onnxruntime as ort

    from training.face_recon import data as D
    from training.face_recon.make_data import render_track_set

    path = tmp_path_factory.mktemp("rt") / "rt.npz"
    render_track_set(3, 24, 6, path)
    raw = D.load_raw(path)
    n = len(raw["subject"])
    feeds = D.full_inputs(raw, np.arange(n))
    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    outs = [sess.run(None, {k: v[i:i + 16] for k, v in feeds.items()}) for i in range(0, n, 16)]
    bs = np.concatenate([o[0] for o in outs])
    rot6 = np.concatenate([o[1] for o in outs])
    dt = np.concatenate([o[2] for o in outs])
    card = json.loads(MODEL.with_name("face_recon.card.json").read_text())
    const = np.array([card["constant_predictor"][k] for k in BLENDSHAPE_NAMES])
    m = D.metrics(bs, raw["weights"], const)
    _, r0, t0 = N.align(raw["landmarks"], raw["image_size"])
    rot, _ = N.compose_pose(r0, t0, rot6, dt)
    m["rot_deg"] = float(np.median(N.rotation_angle_deg(rot, raw["rotation"])))
    m["rot0_deg"] = float(np.median(N.rotation_angle_deg(r0, raw["rotation"])))
    m["frames"] = n
    print(f"\nrender and track: MAE {m['mae']:.4f} (constant {m['const_mae']:.4f}, ratio {m['ratio']:.2f}), "
          f"rotation {m['rot_deg']:.2f} deg median (alignment alone {m['rot0_deg']:.2f}), {n} frames")
    return m


def test_enough_frames_tracked(figures):
    assert figures["frames"] >= 0.8 * 24 * 6


def test_engine_beats_the_constant_predictor_and_refines_the_pose(figures):
    """What the shipped model measurably does (a regression guard below the issue's bars)."""
    assert figures["mae"] <= 0.7 * figures["const_mae"]
    assert figures["rot_deg"] < 0.7 * figures["rot0_deg"]


@pytest.mark.xfail(strict=True, reason="issue bar not met by the shipped model: render-and-track MAE "
                   "0.052, ratio 0.56, rotation 3.1 deg (models/face_recon.md, 'Limits')")
def test_issue_bars_on_render_and_track(figures):
    assert figures["mae"] <= 0.03
    assert figures["mae"] <= 0.5 * figures["const_mae"]
    assert figures["rot_deg"] <= 1.5
