"""render.morph_table: the sparse (vertex, target) table the vertex shader reads."""
from __future__ import annotations

import numpy as np

from avatar_app.avatar.mesh import Material, MeshPrimitive, compute_normals
from avatar_app.render.morph_table import TEXTURE_WIDTH, build_morph_table


def _prim(name: str, n: int) -> MeshPrimitive:
    pos = np.random.default_rng(n).random((n, 3)).astype(np.float32)
    idx = np.arange(3 * (n // 3), dtype=np.uint32)
    return MeshPrimitive(name, pos, compute_normals(pos, idx), idx, Material(name))


def test_entries_are_grouped_by_vertex_and_index_their_targets():
    a, b, bare = _prim("a", 6), _prim("b", 3), _prim("bare", 3)
    da = np.zeros((6, 3), np.float32)
    da[[1, 4]] = [[0.0, 0.01, 0.0], [0.02, 0.0, 0.0]]
    db = np.zeros((6, 3), np.float32)
    db[4] = [0.0, 0.0, -0.03]
    db[5] = [1e-8, 0.0, 0.0]  # below MORPH_POSITION_EPS_M: dropped
    a.morph_targets = {"jawOpen": da, "eyeBlinkLeft": db}
    nb = np.zeros((3, 3), np.float32)
    nb[2] = [0.0, 0.5, 0.0]  # only the normal moves: kept
    b.morph_targets = {"eyeBlinkLeft": np.zeros((3, 3), np.float32)}
    b.morph_normals = {"eyeBlinkLeft": nb}
    table = build_morph_table([a, b, bare], ["jawOpen", "eyeBlinkLeft"])
    assert table.count == 4 and table.height == 1 and table.texels.shape == (TEXTURE_WIDTH, 4)
    ra, rb, rbare = table.ranges
    assert ra[:, 1].tolist() == [0, 1, 0, 0, 2, 0] and rb[:, 1].tolist() == [0, 0, 1] and not rbare[:, 1].any()
    e = table.texels[: 2 * table.count].reshape(-1, 2, 4)
    first, n = ra[4]
    assert n == 2 and sorted(e[first:first + n, 0, 3].tolist()) == [0.0, 1.0]  # both targets of vertex 4
    np.testing.assert_allclose(e[ra[1, 0], 0], [0.0, 0.01, 0.0, 0.0])
    np.testing.assert_allclose(e[rb[2, 0], 1, :3], [0.0, 0.5, 0.0])
    assert not table.texels[2 * table.count:].any()


def test_an_avatar_without_targets_still_gets_one_row():
    table = build_morph_table([_prim("a", 3)], [])
    assert table.count == 0 and table.height == 1 and table.ranges[0].shape == (3, 2)
