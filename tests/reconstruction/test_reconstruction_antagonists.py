"""The mouth fit never reads a smile and a frown on one side, nor the mouth pulled left and right at once."""
from __future__ import annotations

import itertools

import numpy as np

from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.reconstruction import shape_fit as SF


def _brute_force(fit, d):
    """Every way of holding one shape of each conflicting pair at 0, the smallest residual kept."""
    rhs = fit.proj @ (d * fit.axis).reshape(-1) - fit.l1_proj
    lt, best = fit.chol.T, None
    for held in itertools.product(*[(i, j, None) for i, j in fit.exclusive]):
        free = np.ones(len(fit.shapes), bool)
        free[[h for h in held if h is not None]] = False
        x = np.zeros(len(fit.shapes))
        x[free] = SF._bounded_columns(lt[:, free], rhs)
        if any(x[i] > 0 and x[j] > 0 for i, j in fit.exclusive):
            continue
        cost = float(np.sum((lt @ x - rhs) ** 2))
        if best is None or cost < best[0] - 1e-15:
            best = (cost, x)
    return best


def test_a_smile_is_not_read_with_a_frown(testdata):
    """New-user trial: London 021's neutral photo then its smiling one, as a clip: mouthSmile 1.0/1.0
    with mouthFrown 1.0/1.0 (a crooked grimace on the avatar). Now a smile on both sides, no frown."""
    import cv2

    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.tracking import FaceTracker, RunningMode

    folder = testdata / "images" / "london"
    with FaceTracker(RunningMode.IMAGE) as tracker:
        neutral, smiling = (tracker.process_image(cv2.imread(str(folder / f"london_021_{k}.jpg")))
                            for k in ("03", "08"))
    assert neutral is not None and smiling is not None
    solver = GeometricSolver()
    for i in range(75):  # 1.5 s of the neutral face, then the smile (25 fps)
        w = solver.reconstruct(neutral if i < 38 else smiling, i / 25).blendshapes
    names = {n: float(w[BLENDSHAPE_NAMES.index(n)]) for n in BLENDSHAPE_NAMES}
    assert names["mouthSmileLeft"] > 0.5 and names["mouthSmileRight"] > 0.5, names
    for p, q in SF.EXCLUSIVE_MOUTH:
        assert min(names[p], names[q]) == 0.0, (p, q, names[p], names[q])


def test_the_exclusion_keeps_the_best_fit_of_the_allowed_ones():
    """Against a search over every way of holding the antagonists at 0: the kept weights fit as well
    as the best allowed choice (the greedy pairwise choice finds it on these displacements)."""
    rng = np.random.default_rng(3)
    rig = load_face_model()
    checked = 0
    for fit in (SF.default_fits()[0], *SF.jaw_fixed_fits()):
        b = np.asarray(rig.blendshapes, np.float64)[:, fit.points]
        for _ in range(40):
            w = np.zeros(len(BLENDSHAPE_NAMES))
            w[rng.choice(fit.shapes, 4, replace=False)] = rng.uniform(0.2, 1.0, 4)
            for p, q in SF.EXCLUSIVE_MOUTH[:2]:
                w[BLENDSHAPE_NAMES.index(p)], w[BLENDSHAPE_NAMES.index(q)] = rng.uniform(0.3, 1.0, 2)
            d = np.einsum("k,kpc->pc", w, b) + rng.normal(0, 2e-4, (len(fit.points), 3))
            got = fit.solve_points(d)
            assert not any(got[i] > 0 and got[j] > 0 for i, j in fit.exclusive)
            rhs = fit.proj @ (d * fit.axis).reshape(-1) - fit.l1_proj
            cost = float(np.sum((fit.chol.T @ got - rhs) ** 2))
            best = _brute_force(fit, d)
            assert cost <= best[0] * (1 + 1e-6) + 1e-12
            checked += 1
    assert checked == 120


def test_weights_without_a_conflict_are_left_as_the_fit_gives_them():
    mouth = SF.default_fits()[0]
    rng = np.random.default_rng(5)
    for _ in range(50):
        d = rng.normal(0, 1e-3, (len(mouth.points), 3))
        rhs = mouth.proj @ (d * mouth.axis).reshape(-1) - mouth.l1_proj
        x = SF.bounded_fit(mouth.chol.T, rhs)
        if not any(x[i] > 0 and x[j] > 0 for i, j in mouth.exclusive):
            np.testing.assert_array_equal(mouth.solve_points(d), x)
