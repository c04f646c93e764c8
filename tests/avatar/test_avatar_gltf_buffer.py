"""GltfBuffer: aligned views, typed accessors, sparse and dense morph deltas, read back by pygltflib."""
from __future__ import annotations

import numpy as np
import pygltflib
import pytest

from avatar_app.avatar.authoring.gltf_buffer import (ARRAY_BUFFER, FLOAT, UNSIGNED_BYTE, UNSIGNED_INT,
                                                     UNSIGNED_SHORT, GltfBuffer)


def read(g: pygltflib.GLTF2, blob: bytes, index: int) -> np.ndarray:
    """Decode one accessor (dense or sparse) with the glTF rules, independently of GltfBuffer."""
    acc = g.accessors[index]
    ncomp = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}[acc.type]
    dt = {FLOAT: np.float32, UNSIGNED_BYTE: np.uint8, UNSIGNED_SHORT: np.uint16, UNSIGNED_INT: np.uint32}

    def view(bv_index, count, n, dtype):
        bv = g.bufferViews[bv_index]
        return np.frombuffer(blob, dtype, count * n, bv.byteOffset).reshape(count, n)

    out = (view(acc.bufferView, acc.count, ncomp, dt[acc.componentType]).copy() if acc.bufferView is not None
           else np.zeros((acc.count, ncomp), dt[acc.componentType]))
    if acc.sparse is not None:
        idx = view(acc.sparse.indices.bufferView, acc.sparse.count, 1, dt[acc.sparse.indices.componentType])[:, 0]
        out[idx] = view(acc.sparse.values.bufferView, acc.sparse.count, ncomp, dt[acc.componentType])
    return out


def test_views_are_aligned_and_accessors_round_trip():
    g = pygltflib.GLTF2()
    buf = GltfBuffer(g)
    assert len(g.buffers) == 1
    colours = np.arange(12, dtype=np.uint8).reshape(3, 4)
    pos = np.random.default_rng(0).random((5, 3)).astype(np.float32)
    a_col = buf.accessor(colours, target=ARRAY_BUFFER)  # 12 bytes, then floats must start aligned
    buf.view(b"abc")  # 3 bytes: the next view is padded
    a_pos = buf.accessor(pos.astype(np.float64), FLOAT, ARRAY_BUFFER, minmax=True)
    a_t = buf.accessor(np.array([0.0, 0.5, 1.0], np.float32), minmax=True)
    blob = buf.finish()
    assert len(blob) % 4 == 0 and g.buffers[0].byteLength == len(blob)
    assert all(bv.byteOffset % 4 == 0 for bv in g.bufferViews)
    assert g.accessors[a_col].componentType == UNSIGNED_BYTE and g.accessors[a_col].type == "VEC4"
    assert g.accessors[a_t].type == "SCALAR" and g.accessors[a_t].max == [1.0]
    assert np.array_equal(read(g, blob, a_col), colours)
    assert np.array_equal(read(g, blob, a_pos), pos)
    assert g.accessors[a_pos].min == pytest.approx(pos.min(0).tolist())


def test_sparse_and_morph_policies():
    g = pygltflib.GLTF2()
    buf = GltfBuffer(g)
    d = np.zeros((100, 3), np.float32)
    d[[3, 50]] = [[0.1, -0.2, 0.0], [0.0, 0.0, 0.3]]
    s = buf.sparse(d)  # the non-zero rows
    few = buf.morph(d, np.array([3, 50]))  # 2 of 100 rows: sparse is smaller
    most = buf.morph(d + 0.01, np.arange(90))  # 90 of 100 rows: dense is smaller
    none = buf.morph(d, np.array([], np.int64))
    blob = buf.finish()
    for i in (s, few):
        acc = g.accessors[i]
        assert acc.bufferView is None and acc.sparse.count == 2
        assert acc.sparse.indices.componentType == UNSIGNED_SHORT
        assert np.array_equal(read(g, blob, i), d)
        assert acc.min == pytest.approx([0.0, -0.2, 0.0]) and acc.max == pytest.approx([0.1, 0.0, 0.3])
    assert g.accessors[most].sparse is None and np.allclose(read(g, blob, most), d + 0.01)
    assert g.accessors[none].bufferView is None and g.accessors[none].sparse is None
    assert not read(g, blob, none).any()
