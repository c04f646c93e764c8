"""A frozen copy of the post-processing chain's per-frame code as it was before issue 18's tune21.

The One Euro filter (fusion/filters.py), mouth fusion (fusion/mouth.py) and the tuner
(fusion/tuning.py) at main ceffc40, kept verbatim (names prefixed ``Frozen``) so that
tests/fusion/test_fusion_fast_paths.py and benchmarks/post_chain.py can check that the faster
product code gives byte-identical states. Settings, masks, constants and the expression layer
are imported from the product (unchanged by that work).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from avatar_app.core.arrays import clip
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.rotations import nearest_rotation
from avatar_app.core.types import AvatarState
from avatar_app.fusion.expressions import ExpressionLayer
from avatar_app.fusion.mouth import Fusion, _APERTURE, _JAW, _MOUTH_MASK, AUDIO_TRUST, FusionSettings
from avatar_app.fusion.filters import OneEuroFilter, smoothing_factor
from avatar_app.fusion.tuning import (
    AvatarTuner,
    _FLIP_GAZE,
    _FLIP_TRANS,
    _FLIP_X,
    _MIRROR,
    TuningSettings,
    smoothing_cutoff_hz,
)


class FrozenOneEuroFilter(OneEuroFilter):
    """OneEuroFilter with its ``__call__`` as it was at ceffc40."""

    def __call__(self, x: np.ndarray | float, t_s: float) -> np.ndarray:
        """Filter one sample.

        Args:
            x: the sample: any shape, fixed across calls; float values in any unit.
            t_s: its time in seconds; must be larger than the previous call's.

        Returns:
            The filtered sample, float64, same shape as ``x`` (a new array).

        Raises:
            InputError: the shape changed or a value/time is not finite.
            TrackingError: ``t_s`` does not increase.

        The paper's equations, as :func:`smoothing_factor` computes them, with the
        derivative's ``tau`` computed once and the temporaries reused (the same
        floating-point operations in the same order: bit-identical results).
        """
        xv = np.asarray(x, dtype=np.float64)
        t = float(t_s)
        if not math.isfinite(t):
            raise InputError(f"One Euro filter time must be finite, got {t_s}")
        if not np.isfinite(xv).all():
            raise InputError("One Euro filter input contains NaN or infinite values")
        x_prev = self._x
        if x_prev is None:
            self._x = xv.copy()
            self._dx = np.zeros_like(xv)
            self._t_s = t
            return xv.copy()
        if xv.shape != x_prev.shape:
            raise InputError(
                f"One Euro filter input shape changed from {x_prev.shape} to {xv.shape}; "
                "call reset() first"
            )
        if not t > self._t_s:
            raise TrackingError(
                f"One Euro filter timestamps must strictly increase: got {t} s after {self._t_s} s"
            )
        t_e = t - self._t_s
        diff = xv - x_prev
        if not isinstance(diff, np.ndarray):  # a 0-d sample: numpy scalars, no in-place operations
            dx_hat = self._dx + smoothing_factor(t_e, self.d_cutoff_hz) * (diff / t_e - self._dx)
            cutoff = self.min_cutoff_hz + self.beta * np.abs(dx_hat)
            x_hat = np.asarray(x_prev + smoothing_factor(t_e, cutoff) * diff)
            self._x, self._dx, self._t_s = x_hat, np.asarray(dx_hat), t
            return x_hat.copy()
        dx_prev = self._dx
        dx_hat = diff / t_e  # dx
        dx_hat -= dx_prev
        dx_hat *= 1.0 / (1.0 + self._tau_d / t_e)  # smoothing_factor(t_e, d_cutoff_hz)
        dx_hat += dx_prev
        cutoff = np.abs(dx_hat)
        if self._scalar_params:
            cutoff *= self.beta
            cutoff += self.min_cutoff_hz
        else:
            cutoff = self.min_cutoff_hz + self.beta * cutoff
        # smoothing_factor(t_e, cutoff) = 1 / (1 + (1 / (2 pi cutoff)) / t_e), in place
        cutoff *= 2.0 * math.pi
        np.divide(1.0, cutoff, out=cutoff)
        cutoff /= t_e
        cutoff += 1.0
        np.divide(1.0, cutoff, out=cutoff)
        diff *= cutoff
        diff += x_prev  # x_hat
        self._x, self._dx, self._t_s = diff, dx_hat, t
        return diff.copy()


def frozen_fuse_mouth(vision: np.ndarray, audio: np.ndarray, face_found: bool,
               settings: FusionSettings) -> np.ndarray:
    """Per-blendshape fusion of the mouth (no smoothing); see the module docstring.

    Args:
        vision: (52,) float32 vision weights.
        audio: (52,) float32 audio-only weights.
        face_found: whether vision saw the face this frame.
        settings: FusionSettings.

    Returns:
        (52,) float32: ``vision`` with its mouth shapes fused.
    """
    v = np.asarray(vision, np.float32)
    a = np.asarray(audio, np.float32)
    w = v.copy()
    if not face_found or settings.mouth_covered:
        w[_MOUTH_MASK] = a[_MOUTH_MASK]
        return w
    span = max(settings.open_jaw - settings.closed_jaw, 1e-6)
    seen_open = float(clip((v[_JAW] - settings.closed_jaw) / span, 0.0, 1.0))
    a_eff = a * seen_open
    activity = float(clip(a_eff[_MOUTH_MASK].sum() / max(settings.activity_level, 1e-6), 0.0, 1.0))
    mix = float(clip(settings.audio_mix, 0.0, 1.0))
    k = mix * activity * AUDIO_TRUST
    # How far the lips are apart is what the camera sees best: while the mouth is in view the
    # voice never changes it (it neither closes a mouth seen open nor opens one seen closed).
    k[_APERTURE] = 0.0
    w[_MOUTH_MASK] = v[_MOUTH_MASK] + k[_MOUTH_MASK] * (a_eff[_MOUTH_MASK] - v[_MOUTH_MASK])
    return w


class FrozenFusion(Fusion):
    """Fusion with the mouth fusion as it was at ceffc40 (the rest of ``fuse`` is the product's)."""

    mouth = staticmethod(frozen_fuse_mouth)


class FrozenAvatarTuner(AvatarTuner):
    """AvatarTuner's per-frame code at ceffc40 (one OneEuroFilter per region, dataclass ``replace``); the
    methods that work left alone (settings, remap, link eyes, lost face, preview) are the product's."""

    def __init__(self, settings: TuningSettings | None = None, expressions: ExpressionLayer | None = None,
                 seed: int = 7, lost_after_s: float = 0.8):
        super().__init__(settings, expressions, seed, lost_after_s)
        self._filters: dict[str, FrozenOneEuroFilter] = {}
        self._filter_cut: dict[str, float] = {}

    def reset(self) -> None:
        """Forget filter state (e.g. when the source changes)."""
        with self._lock:
            self._filters.clear()
            self._last_t = None
            self._lost_since = None

    # -- steps ---------------------------------------------------------------------
    @staticmethod
    def mirror(state: AvatarState) -> AvatarState:
        """The state of your reflection: L/R shapes swapped, yaw/roll/gaze yaw/x negated.

        Rotation ``R' = S R S`` with ``S = diag(-1, 1, 1)`` (a reflection through the
        YZ plane of camera space), which negates yaw and roll and keeps pitch.
        """
        w = np.asarray(state.weights, np.float32)[_MIRROR]
        rot = (_FLIP_X @ np.asarray(state.rotation, np.float32) @ _FLIP_X).astype(np.float32)
        trans = np.asarray(state.translation, np.float32) * _FLIP_TRANS
        gaze = np.asarray(state.gaze, np.float32) * _FLIP_GAZE
        return replace(state, weights=w, rotation=rot, translation=trans, gaze=gaze,
                       vision_weights=np.asarray(state.vision_weights, np.float32)[_MIRROR],
                       audio_weights=np.asarray(state.audio_weights, np.float32)[_MIRROR])

    def _filter(self, key: str, x: np.ndarray, t: float, amount: float, beta: float) -> np.ndarray:
        if amount <= 0.0:
            self._filters.pop(key, None)
            return x
        cut = smoothing_cutoff_hz(amount)
        f = self._filters.get(key)
        if f is None or self._filter_cut.get(key) != cut:
            old = f.value if f is not None else None
            f = OneEuroFilter(min_cutoff_hz=cut, beta=beta)
            if old is not None and self._last_t is not None:
                f(old, self._last_t)  # keep the current value: no jump when the slider moves
            self._filters[key] = f
            self._filter_cut[key] = cut
        return f(x, t)

    def _smooth(self, w: np.ndarray, rot: np.ndarray, trans: np.ndarray, gaze: np.ndarray,
                t: float, s: TuningSettings):
        out = w.astype(np.float64)
        for region in ("eyes", "brows", "mouth"):
            m = self._rows[region]
            out[m] = self._filter(region, w[m], t, s.smoothing.get(region, 0.0), beta=0.5)
        head = s.smoothing.get("head", 0.0)
        rot = nearest_rotation(self._filter("head_rot", rot, t, head, beta=0.3)).astype(np.float32)
        trans = self._filter("head_trans", trans, t, head, beta=0.3).astype(np.float32)
        gaze = self._filter("gaze", gaze, t, s.smoothing.get("eyes", 0.0), beta=0.5).astype(np.float32)
        return out.astype(np.float32), rot, trans, gaze

    def __call__(self, state: AvatarState) -> AvatarState:
        """Apply every step to one state (see the module docstring).

        Args:
            state: the pipeline's fused state (time: its ``media_time_s``, seconds).

        Returns:
            A new AvatarState (weights (52,) float32 in [0, 1]).
        """
        with self._lock:
            s = self._settings
            t = float(state.media_time_s)
            if self._last_t is not None and t <= self._last_t:
                t = self._last_t + 1e-6  # one clock per pipeline; tolerate a repeat
            raw = np.asarray(state.weights, np.float32)
            w = self.remap(raw, s)
            w, rot, trans, gaze = self._smooth(w, np.asarray(state.rotation, np.float64),
                                               np.asarray(state.translation, np.float64),
                                               np.asarray(state.gaze, np.float64), t, s)
            if s.link_eyes:  # after smoothing: the eyes are equal from the first frame it is on
                w = self.link_eyes(w)
            out = replace(state, weights=w, rotation=rot, translation=trans, gaze=gaze)
            if s.mirror:
                out = self.mirror(out)
            w2, rot2 = self._lost_face(np.asarray(out.weights, np.float32).copy(),
                                       np.asarray(out.rotation, np.float32), t, state.face_found, s)
            self._last_t = t
            self._record(t, raw, state.rotation, w, rot)
        w2 = self.expressions.apply(w2, t)
        return replace(out, weights=clip(w2, 0.0, 1.0).astype(np.float32), rotation=rot2)
