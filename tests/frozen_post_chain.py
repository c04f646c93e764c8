"""A frozen copy of the post-processing chain's per-frame code as it was before issue 18's tune21.

The One Euro filter (fusion/filters.py), mouth fusion (fusion/mouth.py) and the tuner
(fusion/tuning.py) at main ceffc40, kept verbatim (names prefixed ``Frozen``) so that
tests/fusion/test_fusion_fast_paths.py and benchmarks/post_chain.py can check that the faster
product code gives byte-identical states. Settings, masks, constants and the expression layer
are imported from the product (unchanged by that work).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from avatar_app.core.arrays import clip
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
    """OneEuroFilter's arithmetic as the paper writes it, with :func:`smoothing_factor` (the form
    ceffc40's in-place code was written to equal bit for bit: the same IEEE operations, up to
    the order of the operands of + and *); the checks are the product's (unchanged)."""

    def __call__(self, x: np.ndarray | float, t_s: float) -> np.ndarray:
        xv, t = self._checked(x, t_s)
        if self._x is None:
            self._x, self._dx, self._t_s = xv.copy(), np.zeros_like(xv), t
            return xv.copy()
        t_e = t - self._t_s
        diff = xv - self._x
        dx_hat = self._dx + smoothing_factor(t_e, self.d_cutoff_hz) * (diff / t_e - self._dx)
        cutoff = self.min_cutoff_hz + self.beta * np.abs(dx_hat)
        x_hat = np.asarray(self._x + smoothing_factor(t_e, cutoff) * diff)
        self._x, self._dx, self._t_s = x_hat, np.asarray(dx_hat), t
        return x_hat.copy()


def frozen_fuse_mouth(vision: np.ndarray, audio: np.ndarray, face_found: bool,
                      settings: FusionSettings) -> np.ndarray:
    """fuse_mouth at ceffc40, whole-array boolean masks (the same statements, some joined)."""
    v, a = np.asarray(vision, np.float32), np.asarray(audio, np.float32)
    w, m = v.copy(), _MOUTH_MASK
    if not face_found or settings.mouth_covered:
        w[m] = a[m]
        return w
    span = max(settings.open_jaw - settings.closed_jaw, 1e-6)
    a_eff = a * float(clip((v[_JAW] - settings.closed_jaw) / span, 0.0, 1.0))
    activity = float(clip(a_eff[m].sum() / max(settings.activity_level, 1e-6), 0.0, 1.0))
    k = float(clip(settings.audio_mix, 0.0, 1.0)) * activity * AUDIO_TRUST
    k[_APERTURE] = 0.0
    w[m] = v[m] + k[m] * (a_eff[m] - v[m])
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
        """AvatarTuner.__call__ at ceffc40 (the same statements, some joined)."""
        with self._lock:
            s, t = self._settings, float(state.media_time_s)
            t = self._last_t + 1e-6 if self._last_t is not None and t <= self._last_t else t
            raw = np.asarray(state.weights, np.float32)
            w = self.remap(raw, s)
            f64 = [np.asarray(a, np.float64) for a in (state.rotation, state.translation, state.gaze)]
            w, rot, trans, gaze = self._smooth(w, *f64, t, s)
            w = self.link_eyes(w) if s.link_eyes else w
            out = replace(state, weights=w, rotation=rot, translation=trans, gaze=gaze)
            if s.mirror:
                out = self.mirror(out)
            w2, rot2 = self._lost_face(np.asarray(out.weights, np.float32).copy(),
                                       np.asarray(out.rotation, np.float32), t, state.face_found, s)
            self._last_t = t
            self._record(t, raw, state.rotation, w, rot)
        w2 = self.expressions.apply(w2, t)
        return replace(out, weights=clip(w2, 0.0, 1.0).astype(np.float32), rotation=rot2)
