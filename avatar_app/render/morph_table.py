"""The renderer's sparse morph table: every (vertex, target) pair that moves, packed for one float texture.

Each entry is two RGBA32F texels: (dx, dy, dz, target index) and (dnx, dny, dnz, 0),
entries of one vertex contiguous; every vertex carries (first entry, count) as a
vertex attribute, so the vertex shader loops over the pairs that exist (a few per
vertex on a face, none on hair or clothes) instead of over all targets.
``TEXTURE_WIDTH`` must match ``MORPH_WIDTH_LOG2`` in ``assets/shaders/avatar.vert``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from avatar_app.avatar.mesh import MeshPrimitive

#: Texels per row of the morph texture: 2**12, even, so an entry's two texels never straddle rows.
TEXTURE_WIDTH = 4096
#: Deltas below these are dropped from the table (metres / normal units).
MORPH_POSITION_EPS_M = 1e-6
MORPH_NORMAL_EPS = 1e-4


@dataclass(frozen=True)
class MorphTable:
    """The packed table of :func:`build_morph_table`.

    Attributes:
        texels: (height * TEXTURE_WIDTH, 4) float32, the texture's contents (zero padded).
        height: texture rows.
        ranges: per primitive, (V, 2) int32 (first entry, entry count) of each vertex.
        count: number of entries (two texels each).
    """

    texels: np.ndarray
    height: int
    ranges: list[np.ndarray]
    count: int


def _primitive_entries(prim: MeshPrimitive, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """((E, 2, 4) float32 entries sorted by vertex, (V,) int64 entries per vertex) of one primitive."""
    vert_ids, tgt_ids, dpos, dnrm = [], [], [], []
    for t, name in enumerate(names):
        d = prim.morph_targets.get(name)
        if d is None:
            continue
        dn = prim.morph_normals.get(name)
        moved = np.abs(d).max(axis=1) > MORPH_POSITION_EPS_M
        if dn is not None:
            moved |= np.abs(dn).max(axis=1) > MORPH_NORMAL_EPS
        ids = np.flatnonzero(moved)
        vert_ids.append(ids)
        tgt_ids.append(np.full(ids.size, t))
        dpos.append(d[ids])
        dnrm.append(dn[ids] if dn is not None else np.zeros((ids.size, 3), np.float32))
    v = prim.num_vertices
    if not vert_ids:
        return np.zeros((0, 2, 4), np.float32), np.zeros(v, np.int64)
    vid = np.concatenate(vert_ids)
    order = np.argsort(vid, kind="stable")
    e = np.zeros((vid.size, 2, 4), np.float32)
    e[:, 0, :3] = np.concatenate(dpos)[order]
    e[:, 0, 3] = np.concatenate(tgt_ids)[order]
    e[:, 1, :3] = np.concatenate(dnrm)[order]
    return e, np.bincount(vid, minlength=v)


def build_morph_table(primitives: Sequence[MeshPrimitive], names: Sequence[str]) -> MorphTable:
    """Pack the morph deltas of an avatar's primitives.

    Args:
        primitives: the avatar's primitives, in upload order.
        names: the avatar's target names; an entry stores the index into this list.

    Returns:
        The MorphTable (at least one row, so an avatar without targets still binds a texture).
    """
    entries, ranges, count = [], [], 0
    for prim in primitives:
        e, counts = _primitive_entries(prim, names)
        rng = np.zeros((prim.num_vertices, 2), np.int32)
        rng[:, 1] = counts
        rng[:, 0] = count + np.concatenate([[0], np.cumsum(counts)[:-1]])
        if len(e):
            entries.append(e.reshape(-1, 4))
            count += len(e)
        ranges.append(rng)
    height = -(-max(count * 2, 2) // TEXTURE_WIDTH)
    texels = np.zeros((height * TEXTURE_WIDTH, 4), np.float32)
    if entries:
        texels[: count * 2] = np.concatenate(entries)
    return MorphTable(texels, height, ranges, count)
