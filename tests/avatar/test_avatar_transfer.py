"""Deformation transfer building blocks: alignment, warp, surface interpolation, correspondence."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.authoring.procedural import grid_indices
from avatar_app.avatar.authoring.transfer import (
    SurfaceInterpolator,
    ThinPlateWarp,
    contour_weights,
    fit_correspondence,
    weld_nodes,
)
from avatar_app.core.errors import InputError


def _rotation(rng) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def test_thin_plate_warp_interpolates_its_anchors_and_keeps_affine_maps():
    rng = np.random.default_rng(1)
    src = rng.normal(size=(12, 3))
    dst = src + 0.1 * rng.normal(size=(12, 3))
    warp = ThinPlateWarp(src, dst)
    assert np.allclose(warp(src), dst, atol=1e-9)
    a = rng.normal(size=(3, 3)) + 2 * np.eye(3)
    affine = ThinPlateWarp(src, src @ a.T + 1.0)
    q = rng.normal(size=(5, 3))
    assert np.allclose(affine(q), q @ a.T + 1.0, atol=1e-8)
    assert np.allclose(affine.jacobian(q), np.broadcast_to(a, (5, 3, 3)), atol=1e-6)
    with pytest.raises(InputError, match="degenerate"):
        ThinPlateWarp(np.zeros((5, 3)), np.zeros((5, 3)))


def test_contour_weights_interpolate_linearly_and_clamp():
    w = contour_weights([-1.0, 0.0, 1.0], [-2.0, -0.5, 0.0, 0.25, 1.0])
    assert np.allclose(w.sum(axis=1), 1.0)
    assert np.allclose(w @ np.array([10.0, 20.0, 40.0]), [10.0, 15.0, 20.0, 25.0, 40.0])


def _sheet(rows: int, cols: int, z: float = 0.0, dx: float = 0.002) -> tuple[np.ndarray, np.ndarray]:
    y, x = np.mgrid[0:rows, 0:cols]
    pos = np.stack([x * dx, y * dx, np.full_like(x, z, dtype=float)], -1).reshape(-1, 3).astype(float)
    return pos, grid_indices(rows, cols, wrap=False)


def test_interpolator_keeps_handles_reproduces_linear_fields_and_bounds_support():
    pos, idx = _sheet(21, 21)
    n = 21
    border = [i for i in range(len(pos)) if i // n in (0, n - 1) or i % n in (0, n - 1)]
    inner = [10 * n + 10, 5 * n + 14]
    handles = np.array(border + inner)
    interp = SurfaceInterpolator(pos, idx, handles, free_radius_m=1.0)
    lin = pos @ [3.0, -2.0, 0.0] + 0.5
    out = interp(lin[handles][:, None])[:, 0]
    assert np.allclose(out[handles], lin[handles])
    assert np.abs(out - lin).max() < 0.06 * np.ptp(lin)  # close to the linear field it samples
    # a bump at one handle stays smooth, bounded and local with a small support radius
    local = SurfaceInterpolator(pos, idx, np.array([10 * n + 10]), free_radius_m=0.008)
    bump = local(np.array([[1.0]]))[:, 0]
    d = np.linalg.norm(pos - pos[10 * n + 10], axis=1)
    assert bump[10 * n + 10] == 1.0 and np.all(bump[d > 0.0085] == 0.0)
    assert bump.max() <= 1.0 + 1e-9 and bump[d < 0.003].min() > 0.3


def test_surfaces_that_touch_but_are_not_connected_move_independently():
    """Two sheets at the same place (the lips): one handle moves only its own sheet."""
    a_pos, a_idx = _sheet(6, 6)
    pos = np.concatenate([a_pos, a_pos])
    idx = np.concatenate([a_idx, a_idx + len(a_pos)])
    node, count = weld_nodes(pos, idx)
    assert count == 2 * len(a_pos)  # coincident but unconnected vertices are not merged
    interp = SurfaceInterpolator(pos, idx, np.array([0, len(a_pos)]), free_radius_m=1.0)
    out = interp(np.array([[1.0], [0.0]]))[:, 0]
    assert np.allclose(out[: len(a_pos)], 1.0) and np.allclose(out[len(a_pos):], 0.0)


def test_welded_seams_move_together():
    pos, idx = _sheet(4, 4)
    pos = np.concatenate([pos, pos[:4]])  # a duplicated row, stitched with zero-length edges
    idx = np.concatenate([idx, [0, 16, 1, 1, 16, 17]]).astype(np.uint32)
    node, _ = weld_nodes(pos, idx)
    assert node[0] == node[16] and node[1] == node[17]


def test_interpolator_rejects_bad_input():
    pos, idx = _sheet(4, 4)
    with pytest.raises(InputError, match="at least one handle"):
        SurfaceInterpolator(pos, idx, np.array([], int))
    with pytest.raises(InputError, match="out of range"):
        SurfaceInterpolator(pos, idx, np.array([99]))
    with pytest.raises(InputError, match="both a handle and held at zero"):
        SurfaceInterpolator(pos, idx, np.array([3]), zero=np.array([3]))
    interp = SurfaceInterpolator(pos, idx, np.array([3, 5]))
    with pytest.raises(InputError, match="expected 2 handle values"):
        interp(np.zeros((3, 1)))


def test_correspondence_recovers_a_scaled_copy():
    """A 'rig' that is a rotated, scaled copy of the avatar's points attaches every point to itself."""
    rng = np.random.default_rng(3)
    avatar = rng.uniform(-0.05, 0.05, size=(60, 3))
    rot = _rotation(rng)
    rig = (avatar - 0.01) @ rot / 1.25  # avatar = 1.25 rot (rig) + 0.01
    anchors = {i: avatar[i] for i in range(0, 60, 6)}
    corr = fit_correspondence(rig, avatar, anchors, attached={1: 1},
                              regions=[(np.arange(60), np.arange(60))], max_distance_m=0.001)
    assert corr.scale == pytest.approx(1.25) and np.allclose(corr.rotation, rot)
    one_hot = corr.mix.max(axis=1) > 0.999
    assert one_hot.all() and len(corr.vertices) == 60
    assert np.array_equal(corr.landmarks[np.argmax(corr.mix, axis=1)], corr.vertices)
    assert corr.residual_m.max() < 1e-9
    d = rng.normal(size=(60, 3)) * 1e-3
    mapped = corr.map_offsets(d)
    assert np.allclose(mapped, 1.25 * d[corr.landmarks[np.argmax(corr.mix, axis=1)]] @ rot.T)
    with pytest.raises(InputError, match="at least 4 anchors"):
        fit_correspondence(rig, avatar, {0: avatar[0]}, {}, [])
