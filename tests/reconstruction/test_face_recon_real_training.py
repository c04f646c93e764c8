"""The real-face training pieces of face_recon: runtime-exact feeds and the analysis-by-synthesis loss."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model
from avatar_app.reconstruction import normalise as N
from avatar_app.reconstruction.auto_neutral import NeutralEstimator
from training.face_recon.make_data import synthetic_set
from training.face_recon.real_data import _feeds


def _heads(n: int = 6) -> list[np.ndarray]:
    raw = synthetic_set(3, n)
    head, _, _ = N.align(raw["landmarks"], raw["image_size"])
    return list(head)


def test_a_still_is_its_own_neutral():
    h = _heads(1)[0]
    x, n = _feeds([h], [0.0])
    sub = np.asarray(N.SUBSET)
    assert np.all(x == 0)
    assert np.allclose(n[0], (h - N.template().astype(np.float32))[sub], atol=1e-6)


def test_video_feeds_follow_the_automatic_neutral_in_time_order():
    heads = _heads(6)
    times = [0.1 * i for i in range(6)]
    x, _ = _feeds(heads, times)
    est = NeutralEstimator()
    sub = np.asarray(N.SUBSET)
    for i, (h, t) in enumerate(zip(heads, times)):
        est.update(h, t)
        assert np.allclose(x[i], (h - est.value)[sub], atol=1e-6)
    assert np.abs(x[-1]).max() > 1e-4  # later frames differ from the running neutral


def test_landmark_residual_vanishes_for_the_true_weights_only():
    torch = pytest.importorskip(
        "torch", reason="training/ needs PyTorch (training/face_recon/README.md), not a test dependency")
    from avatar_app.core.blendshapes import Blendshape as B
    from training.face_recon.train_real import landmark_residual

    rig = load_face_model()
    sub = np.asarray(N.SUBSET)
    w = np.zeros((1, 52), np.float32)
    w[0, B.jawOpen], w[0, B.mouthSmileLeft] = 0.6, 0.4
    ident = np.full(rig.num_identity, 0.3, np.float32)
    nh = rig.evaluate(np.zeros(52), ident)[sub][None]
    x = rig.evaluate(w[0], ident)[sub][None] - nh
    offs = torch.from_numpy(np.asarray(rig.blendshapes)[:, sub].copy())
    eye = torch.eye(3)[None]
    args = (torch.from_numpy(x), torch.from_numpy(nh), offs)
    good = landmark_residual(torch.from_numpy(w), eye, args[0], args[1], args[2])
    bad = landmark_residual(torch.zeros(1, 52), eye, args[0], args[1], args[2])
    assert good.abs().max() < 1e-3  # centimetres
    assert bad.abs().max() > 0.3
