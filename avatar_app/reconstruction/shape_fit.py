"""Blendshapes fitted to the face's visible displacement through the face model (analysis by synthesis).

The face model (:mod:`avatar_app.avatar.face_model`) has MediaPipe's topology
and is linear: ``points = neutral + B w``. So for a region of the face (the
mouth, the brows) the weights that best reproduce what the camera sees solve a
small bounded least-squares problem::

    w* = argmin_{0 <= w <= 1}  || S (B_r w - (p_r - n_r)) ||^2 + sum_b lambda_b w_b^2

with ``p_r`` the frame's head-frame points of the region (aligned to the
model's template, :func:`avatar_app.reconstruction.normalise.align`), ``n_r``
the user's neutral of the same points, ``B_r`` the model's shape offsets there,
``S`` a per-axis weight (MediaPipe's depth is less reliable than x and y) and
``lambda`` a small ridge prior that keeps rarely-needed shapes near 0 (the
landmark loss with sparsity prior of DECA / 3DDFA-style fitting, solved in
closed form per frame). The fit is deterministic and costs well under a
millisecond per region (a non-negative least squares on up to 27 shapes).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from avatar_app.core import landmarks as lmk
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

#: Mouth shapes the fit may use, and their ridge weights (1 = the default prior).
MOUTH_SHAPES: dict[str, float] = {
    "jawOpen": 0.1, "mouthClose": 1.0, "mouthFunnel": 1.0, "mouthPucker": 1.0,
    "mouthLeft": 1.0, "mouthRight": 1.0, "mouthSmileLeft": 0.5, "mouthSmileRight": 0.5,
    "mouthFrownLeft": 1.0, "mouthFrownRight": 1.0, "mouthStretchLeft": 1.0, "mouthStretchRight": 1.0,
    "mouthLowerDownLeft": 2.0, "mouthLowerDownRight": 2.0, "mouthUpperUpLeft": 2.0, "mouthUpperUpRight": 2.0,
    "jawLeft": 20.0, "jawRight": 20.0,
}
#: Not fitted (left at 0): mouthRoll/Shrug/Press/Dimple and jawForward move the lip contour by
#: 2-5 mm in ways MediaPipe does not resolve; fitted, they took up its jitter and its
#: mirror asymmetry (0.45 of mouthShrugLower on a flipped still).
BROW_SHAPES: dict[str, float] = {
    "browInnerUp": 1.0, "browDownLeft": 1.0, "browDownRight": 1.0, "browOuterUpLeft": 1.0,
    "browOuterUpRight": 1.0,
}
MOUTH_POINTS: tuple[int, ...] = tuple(sorted(set(
    lmk.LIP_OUTER_UPPER + lmk.LIP_OUTER_LOWER + lmk.LIP_INNER_UPPER + lmk.LIP_INNER_LOWER + (152,))))
BROW_POINTS: tuple[int, ...] = tuple(sorted(set(
    lmk.LEFT_BROW_UPPER + lmk.LEFT_BROW_LOWER + lmk.RIGHT_BROW_UPPER + lmk.RIGHT_BROW_LOWER)))
#: Rigid points of the nose ridge that no shape of the face model moves: displacements are
#: measured relative to their mean (see GeometricSolver).
ANCHOR_POINTS: tuple[int, ...] = (197, 195, 5, 4)
#: Per-axis weights of the residual (x, y, z): MediaPipe's relative depth is the noisiest axis.
AXIS_WEIGHTS = (1.0, 1.0, 0.5)
#: Extra weight of single points in the residual: the mouth corners carry smiles, frowns and
#: the mouth's width with two points of the 41 (MediaPipe tracks them well), and the corners'
#: height is read against the inner lips' midpoints (13, 14). Weighted 6/6/1/1 the fit traded
#: them against the rest of the lip contour: pooled corner-height r 0.744 there, 0.758 here
#: (benchmarks/fidelity.py, with the corner prior of GeometricSolverConfig), lip gap 0.978 / 0.979.
#: Heavier (12/12/3/3: 0.761) they carried MediaPipe's mirror asymmetry of the corners into the
#: flip relation (a mirrored London smile read mouthFrown 0.42; tests/reconstruction/
#: test_reconstruction_relations.py), and 13/14 at 4 broke the rescaling relation.
POINT_WEIGHTS: dict[int, float] = {61: 8.0, 291: 8.0, 13: 2.0, 14: 2.0}
#: Sparsity threshold (L1 prior), metres: a shape is used only when the (weighted) displacement
#: along its direction exceeds this, so MediaPipe's jitter on a still face (about 1 px, 1.5 mm
#: on a 100 px face, correlated over the region) does not flicker the avatar
#: (tests/reconstruction/test_reconstruction_relations.py).
DEAD_ZONE = 0.0005
#: Ridge scale, in squared metres per unit weight: a shape must explain at least ~1 mm of
#: displacement over the region before the prior lets it take a noticeable weight.
RIDGE_M2 = 2e-6


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Non-negative least squares, ``argmin_{x >= 0} ||a x - b||``.

    The active-set algorithm of Lawson and Hanson (*Solving Least Squares Problems*,
    1974, ch. 23, algorithm NNLS), the one ``scipy.optimize.nnls`` implements, on the
    normal equations as in Bro and De Jong's FNNLS (J. Chemometrics 11(5), 1997): the
    Gram matrix ``a^T a`` is formed once and each passive-set solve is a small
    symmetric system. In numpy because the desktop bundle leaves scipy out. Meant for
    the small, dense, well-conditioned problems of :class:`RegionFit` (tens of unknowns).

    Args:
        a: (M, N) float design matrix.
        b: (M,) float target.
        max_iter: bound on inner iterations (default ``3 N``).

    Returns:
        (N,) float64 solution, every entry ``>= 0``.

    Raises:
        ValueError: shapes that do not match.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.ndim != 2 or b.shape != (a.shape[0],):
        raise ValueError(f"nnls: a must be (M, N) and b (M,), got {a.shape} and {b.shape}")
    n = a.shape[1]
    x = np.zeros(n)
    if n == 0:
        return x
    gram, atb = a.T @ a, a.T @ b
    passive = np.zeros(n, bool)
    tol = 10 * np.finfo(np.float64).eps * max(a.shape) * max(np.abs(a).sum(0).max(), 1e-300)
    budget = 3 * n if max_iter is None else int(max_iter)
    w = atb.copy()
    while budget > 0 and (~passive).any() and w[~passive].max() > tol:
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while budget > 0:  # inner loop: keep the passive set's unconstrained solution feasible
            budget -= 1
            z = np.zeros(n)
            idx = np.flatnonzero(passive)
            z[idx] = _passive_solve(gram[np.ix_(idx, idx)], atb[idx])
            if (z[passive] > tol).all():
                break
            bad = passive & (z <= tol)
            alpha = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = np.where(passive, np.maximum(z, 0.0), 0.0)
        w = atb - gram @ x
    return x


def _passive_solve(g: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Solve ``g z = r`` for a Gram submatrix: Cholesky when positive definite, else least squares."""
    try:
        c = np.linalg.cholesky(g)
    except np.linalg.LinAlgError:  # a rank-deficient passive set (not in RegionFit, whose L is full rank)
        return np.linalg.lstsq(g, r, rcond=None)[0]
    return np.linalg.solve(c.T, np.linalg.solve(c, r))


def _fastest_nnls():
    """scipy's NNLS (compiled, ~15x faster here) where scipy is installed, else :func:`nnls`.

    Both are Lawson and Hanson's algorithm and agree to rounding (tests/reconstruction/
    test_reconstruction_nnls.py); the desktop bundle leaves scipy out and uses :func:`nnls`.
    """
    try:
        from scipy.optimize import nnls as scipy_nnls
    except ImportError:
        return nnls
    return lambda a, b: scipy_nnls(a, b)[0]


_NNLS = _fastest_nnls()


def _scipy_nnls_core():
    """The compiled routine that scipy's public NNLS (:data:`_NNLS`) calls after its argument checks
    (``core(a, b, maxiter) -> (x, rnorm, info)``), or None (no scipy, or no such routine).

    The wrapper's checks (two ``asarray_chkfinite``, shape tests, a deprecation decorator) cost
    ~7 us a call, as much as the fit itself on RegionFit's 18 x 18 systems; :func:`_nnls_core`
    calls the core directly for arrays it knows to be C-ordered, float64 and finite, which is
    what the wrapper passes on unchanged, so the result is the same bits. The core is private to
    scipy: it is used only if it imports and agrees bit for bit with the public function on a
    small problem here, else the public function is.
    """
    if _NNLS is nnls:
        return None
    try:
        from scipy.optimize._slsqplib import nnls as core

        rng = np.random.default_rng(0)
        a = np.ascontiguousarray(np.tril(rng.random((6, 6))).T + np.eye(6))
        b = rng.normal(size=6)
        x, _, info = core(a, b, 18)
        if info == 3 or not np.array_equal(x, _NNLS(a, b)):
            return None
    except Exception:  # noqa: BLE001 - any trouble with a private routine: use the public one
        return None
    return core


_NNLS_PUBLIC = _NNLS
_NNLS_CORE = _scipy_nnls_core()


def _nnls_core(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """scipy's NNLS through its compiled core for a C-ordered, finite float64 ``a`` (a RegionFit's
    ``L^T``): the same bits as :data:`_NNLS`; None where that does not hold (no usable core, a test's
    replacement of :data:`_NNLS`, a non-finite ``b``): the caller then runs :data:`_NNLS` as before.

    Args:
        a: (S, S) C-contiguous float64, every entry finite (the caller's guarantee).
        b: (S,) float64.

    Returns:
        (S,) float64 ``argmin_{x >= 0} ||a x - b||``, or None.
    """
    core = _NNLS_CORE
    if core is None or _NNLS is not _NNLS_PUBLIC or not math.isfinite(b.dot(b)):
        return None
    x, _, info = core(a, b, 3 * a.shape[1])
    if info == 3:
        raise RuntimeError("Maximum number of iterations reached.")  # scipy's error
    return x


@dataclass(frozen=True)
class RegionFit:
    """A precomputed bounded least-squares fit of some shapes to some points.

    Attributes:
        points: (P,) landmark indices of the region.
        shapes: (S,) blendshape indices (ARKit order) fitted.
        design: (3P, S) float64 axis-weighted shape offsets.
        chol: (S, S) float64 lower Cholesky factor of ``design.T @ design`` plus the
            ridge prior (diagonal).
        axis: (P, 3) per-point, per-axis residual weights.
        l1: (S,) float64 sparsity (L1) weights: a shape is used only when the displacement
            along its unit direction exceeds ``DEAD_ZONE`` metres.
        proj: (S, 3P) float64 ``L^-1 design^T`` and
        l1_proj: (S,) float64 ``L^-1 l1``: the per-frame right-hand side is one
            matrix-vector product (``L^-1 (design^T d - l1)`` with the triangular solve done
            once here: a LAPACK solve per frame cost 0.02 ms, and up to several ms where
            OpenBLAS handed it to a thread on a busy machine).
        rows: (R, 3P) float64 the height rows' targets from axis-weighted displacements
            (``height_rows`` of :func:`make_region_fit`; R = 0 without them), and
        row_design: (R, S) float64 the shapes' values of the same rows: the normal equations
            are ``(design^T design + row_design^T row_design + ridge) w =
            design^T d_s + row_design^T rows d_s - l1`` (``d_s`` the axis-weighted displacements).
        exclusive: pairs of positions in :attr:`shapes` that are never both used (antagonists:
            :data:`EXCLUSIVE_MOUTH`); where the fit uses both, the one whose removal leaves the
            smaller residual is held at 0 and the rest fitted again.
    """

    points: np.ndarray
    shapes: np.ndarray
    design: np.ndarray
    chol: np.ndarray
    axis: np.ndarray
    l1: np.ndarray
    proj: np.ndarray
    l1_proj: np.ndarray
    rows: np.ndarray | None = None
    row_design: np.ndarray | None = None
    exclusive: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        # Per-frame constants (not fields): L^T C-ordered for the NNLS core (_nnls_core), and
        # proj with the axis weights folded in where that is exact: every weight a power of two
        # (the shipped ones: 1, 0.5 times 8, 2, 1), so proj_ij * (d_j s_j) = (proj_ij s_j) d_j
        # to the bit and solve_points skips a multiply.
        lt = np.ascontiguousarray(self.chol.T, np.float64)
        object.__setattr__(self, "_lt", lt if np.isfinite(lt).all() else None)
        scale = np.asarray(self.axis, np.float64).reshape(-1)
        exact = bool(np.all(np.frexp(scale)[0] == 0.5)) and scale.size == self.proj.shape[1]
        object.__setattr__(self, "_proj_s", np.ascontiguousarray(self.proj * scale) if exact else None)

    def solve(self, delta: np.ndarray) -> np.ndarray:
        """Weights of the region's shapes for a displacement from the neutral.

        The problem is reduced to its normal equations, factored once (``gram = L L^T``),
        so each frame solves a tiny non-negative least squares ``min ||L^T w - L^-1 g||``
        (Lawson and Hanson's NNLS: scipy's, or :func:`nnls` without scipy); a weight above 1 is held at 1
        and the others are fitted again (the upper bound, exact when the held set is right).

        Args:
            delta: (478, 3) float head-frame points of the frame minus those of the
                user's neutral, metres (model frame).

        Returns:
            (S,) float64 weights in [0, 1], in the order of :attr:`shapes`.
        """
        return self.solve_points(np.asarray(delta, np.float64)[self.points])

    def solve_points(self, d: np.ndarray) -> np.ndarray:
        """:meth:`solve` from the displacement of the region's own points only.

        Args:
            d: (P, 3) float64 displacements of :attr:`points`, in their order, metres.

        Returns:
            (S,) float64 weights in [0, 1], in the order of :attr:`shapes`.
        """
        if self._proj_s is not None:
            rhs = self._proj_s @ np.asarray(d, np.float64).reshape(-1) - self.l1_proj
        else:
            rhs = self.proj @ (d * self.axis).reshape(-1) - self.l1_proj
        x = _bounded_fit(self.chol.T, rhs, self._lt)
        if self.exclusive:
            x = self._exclude_antagonists(x, rhs)
        return x

    def _exclude_antagonists(self, x: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """``x`` refitted so that no :attr:`exclusive` pair has both weights above 0.

        The fit is ``min ||L^T w - rhs||`` (normal equations), so holding a weight at 0 is
        dropping its column of ``L^T``: the exact least-squares solution under that constraint.
        Of a conflicting pair, each side is tried held at 0; the smaller residual is kept.
        A smile read with a frown on the same side (new-user trial, a London smile: mouthSmile
        1.0 with mouthFrownLeft 1.0) gave the avatar a crooked grimace: the frown only
        corrected the face model's smile where it overshoots the person's.
        """
        lt = self.chol.T
        held = np.zeros(len(x), bool)
        for _ in range(len(self.exclusive)):
            clash = next(((i, j) for i, j in self.exclusive if x[i] > 0.0 and x[j] > 0.0), None)
            if clash is None:
                break
            best = None
            for k in clash:
                h = held.copy()
                h[k] = True
                free = ~h
                y = np.zeros(len(x))
                y[free] = _bounded_columns(lt[:, free], rhs)
                cost = float(np.sum((lt @ y - rhs) ** 2))
                if best is None or cost < best[0]:
                    best = (cost, h, y)
            _, held, x = best
        return x


def bounded_fit(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``argmin_{0 <= x <= 1} ||a x - rhs||`` for RegionFit's small square systems.

    Lawson and Hanson's NNLS (scipy's, or :func:`nnls` without scipy); a weight above 1 is
    held at 1 and the others are fitted again (exact when the held set is right).

    Args:
        a: (S, S) float64, ``L^T`` of a RegionFit.
        rhs: (S,) float64.

    Returns:
        (S,) float64 in [0, 1].
    """
    return _bounded_fit(a, rhs)


def _bounded_columns(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``argmin_{0 <= x <= 1} ||a x - rhs||`` for a (S, S') column subset of ``L^T`` (S' <= S): the
    loop of :func:`_bounded_fit` (NNLS, weights above 1 held at 1 and the rest fitted again)."""
    n = a.shape[1]
    return _held_at_one(a, rhs, np.zeros(n, bool), np.zeros(n), 0)


def _bounded_fit(a: np.ndarray, rhs: np.ndarray, a_c: np.ndarray | None = None) -> np.ndarray:
    """:func:`bounded_fit`; ``a_c``: ``a`` C-ordered and finite, for :func:`_nnls_core`.

    With the core, the first pass (all weights free) solves on ``a_c``: the loop's ``a[:, free]``
    is then all of ``a`` (which scipy's wrapper copies C-ordered) and ``rhs - a[:, at_one].sum(1)``
    is ``rhs - 0`` = ``rhs``, the same bits. The later passes (a weight above 1, rare), and every
    pass without the core, are the loop as it was, on ``a`` as given.
    """
    first = None if a_c is None or not len(rhs) else _nnls_core(a_c, rhs)
    if first is None:
        return _held_at_one(a, rhs, np.zeros(len(rhs), bool), np.zeros(len(rhs)), 0)
    if not max(first.tolist()) > 1.0:  # the usual case: no weight wants more than 1 (no NaN: rhs is finite)
        return first
    return _held_at_one(a, rhs, first > 1.0, first, 1)


def _held_at_one(a: np.ndarray, rhs: np.ndarray, at_one: np.ndarray, x: np.ndarray, passes: int) -> np.ndarray:
    """The bounded fit's loop from ``passes`` passes done: a weight that wants more than 1 is held at
    1 and the rest fitted again (``x``, ``at_one``: (S',) of the columns of ``a``; updated in place)."""
    for _ in range(len(x) - passes):
        free = ~at_one
        if not free.any():  # every weight held at 1 (scipy's NNLS on no columns aborted the process)
            x[:] = 1.0
            break
        x[free] = _NNLS(a[:, free], rhs - a[:, at_one].sum(1))
        x[at_one] = 1.0
        over = free & (x > 1.0)
        if not over.any():
            break
        at_one |= over
    return np.minimum(x, 1.0)


def make_region_fit(shapes: dict[str, float], points: tuple[int, ...], model=None,
                    ridge_m2: float = RIDGE_M2, dead_zone: float | None = None,
                    height_rows: tuple[tuple[dict[int, float], float], ...] = (),
                    exclusive: tuple[tuple[str, str], ...] = ()) -> RegionFit:
    """Build a :class:`RegionFit` from the face model.

    Args:
        shapes: blendshape name -> ridge weight.
        points: landmark indices of the region.
        model: FaceModel (default: the shipped one).
        ridge_m2: ridge scale.
        dead_zone: sparsity threshold, metres (default :data:`DEAD_ZONE`).
        height_rows: extra residual rows, each ``({landmark: coefficient}, weight)``: the
            weighted combination of the points' vertical (y) displacements (e.g. a mouth
            corner's height above the inner lips' midpoint, :data:`CORNER_HEIGHT_ROWS`) must
            be reproduced by the shapes as well, with that weight. Every landmark must be
            one of ``points``.
        exclusive: pairs of shape names never used together (:attr:`RegionFit.exclusive`);
            a pair with a shape outside ``shapes`` is skipped.

    Returns:
        RegionFit.

    Raises:
        ValueError: a height row names a landmark outside ``points``.
    """
    from avatar_app.avatar.face_model import load_face_model

    model = model or load_face_model()
    dead_zone = DEAD_ZONE if dead_zone is None else float(dead_zone)
    idx = np.array([BLENDSHAPE_NAMES.index(n) for n in shapes], np.intp)
    pts = np.array(points, np.intp)
    axis = np.array(AXIS_WEIGHTS, np.float64)
    pw = np.array([POINT_WEIGHTS.get(int(i), 1.0) for i in pts], np.float64)
    scale = pw[:, None] * axis  # (P, 3)
    b = np.asarray(model.blendshapes, np.float64)[idx][:, pts, :] * scale  # (S, P, 3)
    a = b.reshape(len(idx), -1).T  # (3P, S)
    # Height rows: m (R, 3P) maps raw displacements to the rows' targets; m_s the same map on
    # axis-weighted displacements (what solve_points multiplies), so proj stays one matrix.
    pos = {int(i): k for k, i in enumerate(pts)}
    m = np.zeros((len(height_rows), 3 * len(pts)))
    for r, (coef, weight) in enumerate(height_rows):
        for i, c in coef.items():
            if int(i) not in pos:
                raise ValueError(f"height row landmark {i} is not a point of the region")
            m[r, 3 * pos[int(i)] + 1] += weight * c
    raw = np.asarray(model.blendshapes, np.float64)[idx][:, pts, :].reshape(len(idx), -1).T  # (3P, S)
    a_h = m @ raw  # (R, S)
    gram = a.T @ a + a_h.T @ a_h + np.diag(ridge_m2 * np.array(list(shapes.values()), np.float64))
    l1 = dead_zone * np.sqrt(np.einsum("ij,ij->j", a, a))
    chol = np.linalg.cholesky(gram)
    l_inv = np.linalg.inv(chol)  # (S, S) lower-triangular, well conditioned (ridge)
    m_s = m / scale.reshape(-1)
    names = list(shapes)
    pairs = tuple((names.index(p), names.index(q)) for p, q in exclusive if p in shapes and q in shapes)
    return RegionFit(pts, idx, a, chol, scale, l1, l_inv @ (a.T + a_h.T @ m_s), l_inv @ l1, m_s, a_h, pairs)


#: Rows of the mouth fit that hold each corner's height above the inner lips' midpoint (13, 14),
#: with their weight (see :func:`make_region_fit`). Fitted only point by point, the corners'
#: height was traded against the rest of the lip contour: the face model's jawOpen narrows the
#: mouth 4 mm and a real opening jaw does not, so the fit added a smile to keep the width and
#: raised the corners (grid_lbax4n: the smile followed the jaw). Weight 5, with the closed rest
#: mouth and closed-mouth schedule of GeometricSolver (benchmarks/fidelity.py, pooled r):
#: corner height 0.822 (weight 0) -> 0.861, lip gap 0.979 -> 0.975, re-tracked mouth width
#: 0.886; weight 8 gave 0.868 but re-tracked mouth width 0.878 (the default head's smile widens
#: the mouth more than the face model's), 4: 0.856 / 0.885. Weight 9 once the chin's jaw no
#: longer lifts the corners (GeometricSolver._hold_jaw refits the mouth around it): corner
#: height 0.881 (weight 5) -> 0.9005, lip gap 0.974 -> 0.969, re-tracked mouth width 0.885 ->
#: 0.876, London both criteria 38 % -> 39 %; 10 gave 0.901 and 12 (with a freer refit) 0.904,
#: but one more London neutral photo read as a smile there (face 001: smile 0.153 > 0.15).
CORNER_HEIGHT_WEIGHT = 9.0
#: Antagonist pairs of the mouth fit (the muscles pull the same points opposite ways, so a face
#: shows one of them; Ekman and Friesen's FACS: AU12 lip corner puller against AU15 depressor,
#: and the mouth pulled left or right): the fit never uses both (:attr:`RegionFit.exclusive`).
EXCLUSIVE_MOUTH: tuple[tuple[str, str], ...] = (
    ("mouthSmileLeft", "mouthFrownLeft"), ("mouthSmileRight", "mouthFrownRight"), ("mouthLeft", "mouthRight"))
CORNER_HEIGHT_ROWS: tuple[tuple[dict[int, float], float], ...] = tuple(
    ({c: 1.0, 13: -0.5, 14: -0.5}, CORNER_HEIGHT_WEIGHT) for c in (61, 291))
#: The corner rows' weight in the refits around a jaw the chin holds open (:func:`jaw_fixed_fits`).
#: Since the antagonists are exclusive (EXCLUSIVE_MOUTH), a frown no longer lowers corners that a
#: smile overshoots; in the held-jaw refits (jawOpen fixed, which narrows the face model's mouth
#: 4 mm) the rows must then hold the corners themselves (benchmarks/fidelity.py, solver, pooled r;
#: corner height 0.9005 before the exclusion): 9 gives 0.8966, 12: 0.8990, 20: 0.9007 with lip
#: gap 0.9701 (0.9692), re-tracked mouth width 0.8818 (0.8760), London and GRID's jaw unchanged.
#: Raising the free fit's weight instead (11: corner height 0.9009) cost grid_s2's jaw-words r
#: (0.084 -> 0.074) and a London person.
JAW_HELD_CORNER_WEIGHT = 20.0
JAW_HELD_CORNER_ROWS: tuple[tuple[dict[int, float], float], ...] = tuple(
    ({c: 1.0, 13: -0.5, 14: -0.5}, JAW_HELD_CORNER_WEIGHT) for c in (61, 291))


@functools.lru_cache(maxsize=1)
def default_fits() -> tuple[RegionFit, RegionFit]:
    """The (mouth, brows) fits on the shipped face model (built once)."""
    return (make_region_fit(MOUTH_SHAPES, MOUTH_POINTS, height_rows=CORNER_HEIGHT_ROWS,
                            exclusive=EXCLUSIVE_MOUTH),
            make_region_fit(BROW_SHAPES, BROW_POINTS))


@functools.lru_cache(maxsize=1)
def jaw_fixed_fits() -> tuple[RegionFit, RegionFit]:
    """Mouth fits for a jaw held open by the chin (built once): without jawOpen, and without
    jawOpen and mouthUpperUpLeft/Right.

    :meth:`~avatar_app.reconstruction.geometric.GeometricSolver._hold_jaw` holds jawOpen (and,
    for the second, mouthUpperUp) fixed and fits the other mouth shapes to the displacement those
    leave: the same points and weights as the mouth fit of :func:`default_fits`, the corner-height
    rows at :data:`JAW_HELD_CORNER_WEIGHT`.
    """
    held = ("mouthUpperUpLeft", "mouthUpperUpRight")
    free = {k: v for k, v in MOUTH_SHAPES.items() if k != "jawOpen"}
    return (make_region_fit(free, MOUTH_POINTS, height_rows=JAW_HELD_CORNER_ROWS, exclusive=EXCLUSIVE_MOUTH),
            make_region_fit({k: v for k, v in free.items() if k not in held}, MOUTH_POINTS,
                            height_rows=JAW_HELD_CORNER_ROWS, exclusive=EXCLUSIVE_MOUTH))
