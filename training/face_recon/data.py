"""Turn raw face_recon samples (observations + ground truth) into network inputs and targets.

Shared by train.py, evaluate.py and the tests, so every figure is computed on
inputs normalised exactly as the runtime engine normalises them
(:mod:`avatar_app.reconstruction.normalise`).
"""
from __future__ import annotations

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.reconstruction import normalise as N
#: Shapes vision cannot observe (no landmark moves): fixed at 0 by the model (model.py uses this).
NOT_ESTIMATED = ("tongueOut",)

#: Indices of the blendshapes the engine estimates (all but NOT_ESTIMATED).
ESTIMATED = np.array([i for i, n in enumerate(BLENDSHAPE_NAMES) if n not in NOT_ESTIMATED])


def prepare(raw: dict, chunk: int = 4096) -> dict[str, np.ndarray]:
    """Aligned network inputs and targets of a raw set.

    Args:
        raw: a set from :mod:`training.face_recon.make_data` (``landmarks``,
            ``image_size``, ``subject``, ``neutral_landmarks``,
            ``neutral_image_size``, ``identity``, ``weights``, ``rotation``,
            ``translation``).
        chunk: alignment batch size.

    Returns:
        ``x`` and ``n`` (N, 146, 3) float32 (expression and neutral inputs on
        the subset, metres), ``full_x``/``full_n`` omitted to save memory,
        ``weights`` (N, 52), ``rot_res`` (N, 3, 3) = R0^T R_true,
        ``t_res`` (N, 3) = t_true - t0, ``identity`` (N, K), ``r0`` (N, 3, 3),
        ``t0`` (N, 3), ``rotation``/``translation`` (ground truth).
    """
    sub = np.asarray(N.SUBSET)
    subj = np.asarray(raw["subject"])
    nh_all = np.concatenate([N.align(raw["neutral_landmarks"][i:i + chunk],
                                     raw["neutral_image_size"][i:i + chunk])[0]
                             for i in range(0, len(raw["neutral_landmarks"]), chunk)])
    xs, ns, r0s, t0s = [], [], [], []
    for i in range(0, len(subj), chunk):
        head, r0, t0 = N.align(raw["landmarks"][i:i + chunk], raw["image_size"][i:i + chunk])
        feeds = N.network_inputs(head, nh_all[subj[i:i + chunk]])
        xs.append(feeds["landmarks"][:, sub])
        ns.append(feeds["neutral"][:, sub])
        r0s.append(r0)
        t0s.append(t0)
    r0 = np.concatenate(r0s)
    t0 = np.concatenate(t0s)
    rot = np.asarray(raw["rotation"], np.float64)
    ident = np.asarray(raw["identity"])
    if len(ident) != len(subj):
        ident = ident[subj]
    return {
        "x": np.concatenate(xs), "n": np.concatenate(ns),
        "weights": np.asarray(raw["weights"], np.float32),
        "rot_res": np.einsum("bji,bjk->bik", r0, rot).astype(np.float32),
        "t_res": (np.asarray(raw["translation"], np.float64) - t0).astype(np.float32),
        "identity": ident.astype(np.float32), "r0": r0, "t0": t0, "rotation": rot,
        "translation": np.asarray(raw["translation"], np.float64),
    }


def full_inputs(raw: dict, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Full (B, 478, 3) network feeds ``landmarks``/``neutral`` of some samples of a raw set."""
    idx = np.asarray(idx)
    subj = np.asarray(raw["subject"])[idx]
    head, _, _ = N.align(raw["landmarks"][idx], raw["image_size"][idx])
    nh, _, _ = N.align(raw["neutral_landmarks"][subj], raw["neutral_image_size"][subj])
    return N.network_inputs(head, nh)


def load_raw(path) -> dict[str, np.ndarray]:
    """A render-and-track .npz as a dict of arrays."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def merge_raw(raws: list[dict]) -> dict[str, np.ndarray]:
    """Concatenate render-and-track sets into one (subjects renumbered; ``dropped`` summed).

    Args:
        raws: sets from :func:`load_raw` (same keys).

    Returns:
        One set: per-frame arrays concatenated, ``subject`` offset by the subjects before it,
        per-subject arrays (``neutral_landmarks``, ``neutral_image_size``, ``identity``)
        concatenated; ``dropped`` the sum.
    """
    if len(raws) == 1:
        return raws[0]
    out: dict[str, list] = {}
    offset = 0
    for raw in raws:
        for k, v in raw.items():
            if k == "subject":
                v = v + offset
            if np.ndim(v):
                out.setdefault(k, []).append(v)
        offset += len(raw["identity"])
    merged = {k: np.concatenate(v) for k, v in out.items()}
    merged["dropped"] = np.array(sum(int(r.get("dropped", 0)) for r in raws))
    return merged


def metrics(pred_bs: np.ndarray, weights: np.ndarray, const: np.ndarray, active: float = 0.1) -> dict:
    """Blendshape error figures over the estimated shapes.

    Args:
        pred_bs: (N, 52) predictions.
        weights: (N, 52) targets.
        const: (52,) the constant predictor (training mean).
        active: a shape counts as active in a sample where its target exceeds this.

    Returns:
        ``mae``, ``const_mae``, ``ratio``, and ``per_shape``: name -> {``mae``,
        ``mae_active``, ``n_active``}.
    """
    e = ESTIMATED
    err = np.abs(pred_bs[:, e] - weights[:, e])
    cerr = np.abs(const[None, e] - weights[:, e])
    per = {}
    for j, i in enumerate(e):
        act = weights[:, i] > active
        per[BLENDSHAPE_NAMES[i]] = {"mae": float(err[:, j].mean()),
                                    "mae_active": float(err[act, j].mean()) if act.any() else None,
                                    "n_active": int(act.sum())}
    mae, cmae = float(err.mean()), float(cerr.mean())
    return {"mae": mae, "const_mae": cmae, "ratio": mae / cmae, "per_shape": per}
