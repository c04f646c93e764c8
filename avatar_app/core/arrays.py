"""Small-array helpers for the per-frame path: numpy's own kernels without the wrappers' cost.

``np.clip`` goes through ``numpy.core.fromnumeric`` and ``numpy.core._methods`` before it
calls the ``clip`` ufunc (~4 us per call on the 2-core test machine, more than the
clipping of 52 values itself); :func:`clip` is that ufunc, so results are bit-identical
(same kernel, same casting) for the finite bounds the pipeline passes.
"""
from __future__ import annotations

import numpy as np

try:  # numpy >= 2
    from numpy._core.umath import clip as _clip_ufunc
except ImportError:  # numpy 1.x
    from numpy.core.umath import clip as _clip_ufunc

#: ``clip(a, lo, hi)``: elementwise ``min(max(a, lo), hi)`` (NaN stays NaN), the ufunc ``np.clip``
#: calls. ``a``: array or scalar; ``lo``/``hi``: finite scalars or arrays broadcasting with ``a``.
#: Returns an array of ``a``'s shape (a numpy scalar for a scalar ``a``), dtype as ``np.clip``'s.
clip = _clip_ufunc

_isfinite = np.isfinite
_and_reduce = np.logical_and.reduce


def all_finite(a) -> bool:
    """``np.isfinite(a).all()`` without ``ndarray.all``'s Python wrapper (the same ufunc reduction).

    Args:
        a: array or scalar of numbers.

    Returns:
        True when no element is NaN or infinite (True for an empty array).
    """
    return bool(_and_reduce(_isfinite(a), axis=None))
