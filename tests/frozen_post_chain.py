"""A frozen copy of the post-processing chain's per-frame code as it was before issue 18's tune21.

The One Euro filter (fusion/filters.py), mouth fusion (fusion/mouth.py) and the tuner
(fusion/tuning.py) at main ceffc40, kept verbatim (names prefixed ``Frozen``) so that
tests/fusion/test_fusion_fast_paths.py and benchmarks/post_chain.py can check that the faster
product code gives byte-identical states. Settings, masks, constants and the expression layer
are imported from the product (unchanged by that work).
"""
from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import replace

import numpy as np

from avatar_app.core.arrays import clip
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.rotations import euler_from_rotation, nearest_rotation, rotation_from_euler
from avatar_app.core.types import AvatarState, FaceParams
from avatar_app.fusion.expressions import ExpressionLayer
from avatar_app.fusion.mouth import _APERTURE, _JAW, _MOUTH_MASK, AUDIO_TRUST, FusionSettings
from avatar_app.fusion.tuning import (
    _FLIP_GAZE,
    _FLIP_TRANS,
    _FLIP_X,
    _LINKED_EYES,
    _MIRROR,
    REGIONS,
    TuningSettings,
    smoothing_cutoff_hz,
)


def smoothing_factor(t_e_s: float | np.ndarray, cutoff_hz: float | np.ndarray) -> np.ndarray:
    """Exponential smoothing factor of the One Euro filter.

    Args:
        t_e_s: sampling period, seconds (> 0).
        cutoff_hz: cut-off frequency, Hz (> 0); scalar or array.

    Returns:
        ``alpha = 1 / (1 + 1 / (2 pi fc T_e))`` (float64, broadcast shape), in (0, 1).
    """
    tau = 1.0 / (2.0 * math.pi * np.asarray(cutoff_hz, dtype=np.float64))
    return 1.0 / (1.0 + tau / t_e_s)


class FrozenOneEuroFilter:
    """One Euro filter over a fixed-shape array of independent channels.

    Each element of the input array is filtered independently with the same
    parameters (or per-element parameters, if arrays are given that broadcast
    to the input's shape).

    Args:
        min_cutoff_hz: minimum cut-off frequency, Hz (> 0): lower = less jitter
            at rest, more lag. Paper's suggestion: start at ~1 Hz.
        beta: speed coefficient, seconds per unit of the signal (>= 0): higher =
            less lag when moving fast.
        d_cutoff_hz: cut-off frequency for the derivative, Hz (> 0); the paper uses 1 Hz.

    Raises:
        InputError: a parameter out of range.
    """

    def __init__(
        self,
        min_cutoff_hz: float | np.ndarray = 1.0,
        beta: float | np.ndarray = 0.0,
        d_cutoff_hz: float | np.ndarray = 1.0,
    ) -> None:
        self.min_cutoff_hz = np.asarray(min_cutoff_hz, dtype=np.float64)
        self.beta = np.asarray(beta, dtype=np.float64)
        self.d_cutoff_hz = np.asarray(d_cutoff_hz, dtype=np.float64)
        if np.any(self.min_cutoff_hz <= 0) or np.any(self.d_cutoff_hz <= 0):
            raise InputError("One Euro filter cut-off frequencies must be positive (Hz)")
        if np.any(self.beta < 0):
            raise InputError("One Euro filter beta must be non-negative")
        self._x: np.ndarray | None = None
        self._dx: np.ndarray | None = None
        self._t_s: float | None = None
        # smoothing_factor's tau for the fixed derivative cut-off, computed once (the same operations)
        self._tau_d = 1.0 / (2.0 * math.pi * self.d_cutoff_hz)
        if self._tau_d.ndim == 0:
            self._tau_d = float(self._tau_d)
        self._scalar_params = self.min_cutoff_hz.ndim == 0 and self.beta.ndim == 0

    def reset(self) -> None:
        """Forget the state; the next sample passes through unchanged."""
        self._x = None
        self._dx = None
        self._t_s = None

    @property
    def value(self) -> np.ndarray | None:
        """The last filtered value (float64 array), or None before the first sample."""
        return None if self._x is None else self._x.copy()

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


class FrozenFusion:
    """Combines vision FaceParams and audio weights into final weights and pose.

    Args:
        settings: FusionSettings (mutable: the UI may change it between frames).
    """

    def __init__(self, settings: FusionSettings | None = None):
        self.settings = settings or FusionSettings()
        self._w_filter: FrozenOneEuroFilter | None = None
        self._r_filter: FrozenOneEuroFilter | None = None
        self._t_filter: FrozenOneEuroFilter | None = None

    def reset(self) -> None:
        """Forget the smoothing state (e.g. when the source changes)."""
        self._w_filter = self._r_filter = self._t_filter = None

    def _filters(self):
        s = self.settings
        if self._w_filter is None:
            self._w_filter = FrozenOneEuroFilter(min_cutoff_hz=s.min_cutoff_hz, beta=s.beta)
            self._r_filter = FrozenOneEuroFilter(min_cutoff_hz=1.5, beta=0.3)
            self._t_filter = FrozenOneEuroFilter(min_cutoff_hz=1.0, beta=0.3)
        return self._w_filter, self._r_filter, self._t_filter

    def fuse(
        self, vision: FaceParams, audio: np.ndarray, face_found: bool, t_s: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fuse one frame.

        Args:
            vision: FaceParams from the reconstructor (or the no-face hold).
            audio: (52,) float32 audio-only weights.
            face_found: whether vision saw the face this frame.
            t_s: frame time in seconds (monotonic within a source).

        Returns:
            weights (52,) float32 in [0, 1], rotation (3, 3) float32, translation (3,) float32 m.
        """
        v = np.asarray(vision.blendshapes, np.float32)
        a = np.asarray(audio, np.float32)
        w = frozen_fuse_mouth(v, a, face_found, self.settings)
        rot = np.asarray(vision.rotation, np.float32)
        trans = np.asarray(vision.translation, np.float32)
        if self.settings.smoothing:
            fw, fr, ft = self._filters()
            w = fw(w, t_s)
            rot = nearest_rotation(fr(rot, t_s)).astype(np.float32)
            trans = ft(trans, t_s)
        # sanity guard: finite and in range, else neutral
        if not np.isfinite(w).all():
            w = np.zeros(NUM_BLENDSHAPES, np.float32)
        if not (np.isfinite(rot).all() and np.isfinite(trans).all()):
            rot = np.eye(3, dtype=np.float32)
            trans = np.array([0, 0, -0.6], np.float32)
        return clip(w, 0.0, 1.0).astype(np.float32), rot, trans


class FrozenAvatarTuner:
    """The post-processing step: ``tuner(state) -> state`` (see the module docstring).

    Args:
        settings: initial TuningSettings.
        expressions: the ExpressionLayer (shared with the hotkeys).
        seed: seed of the auto-blink interval generator.
        lost_after_s: seconds without a face before auto-blink and idle motion start
            (after the pipeline's hold-and-ease of ~0.8 s).

    Attributes:
        history: the last ~10 s of (t_s, raw, tuned) values of one shape per region
            (eyes: eyeBlinkLeft, brows: browInnerUp, mouth: jawOpen, head: yaw in
            radians), for the Tracking panel's live preview.

    Thread: ``__call__`` on the processing thread; ``set_settings`` from any thread.
    """

    PREVIEW = {"eyes": "eyeBlinkLeft", "brows": "browInnerUp", "mouth": "jawOpen", "head": "yaw"}

    def __init__(self, settings: TuningSettings | None = None, expressions: ExpressionLayer | None = None,
                 seed: int = 7, lost_after_s: float = 0.8):
        self._lock = threading.Lock()
        self._settings = (settings or TuningSettings()).validate().copy()
        self.expressions = expressions or ExpressionLayer()
        self.lost_after_s = float(lost_after_s)
        self._rng = np.random.default_rng(seed)
        self._filters: dict[str, FrozenOneEuroFilter] = {}
        self._filter_cut: dict[str, float] = {}
        self._last_t: float | None = None
        self._lost_since: float | None = None
        self._next_blink_t: float | None = None
        self._blink_t0: float | None = None
        self._idle = 0.0
        self.history: deque[tuple[float, dict[str, float], dict[str, float]]] = deque(maxlen=1200)
        self._masks = {r: np.array([n in names for n in BLENDSHAPE_NAMES]) for r, names in REGIONS.items()}
        # the masks' indices, ascending: indexing with them takes the same elements in the same order, faster
        self._rows = {r: np.flatnonzero(m) for r, m in self._masks.items()}
        self._preview_rows = [(k, int(Blendshape[v])) for k, v in self.PREVIEW.items() if v != "yaw"]

    @property
    def settings(self) -> TuningSettings:
        """A copy of the current settings."""
        with self._lock:
            return self._settings.copy()

    def set_settings(self, settings: TuningSettings) -> None:
        """Replace the settings (validated; takes effect from the next frame).

        Raises:
            InputError: invalid settings.
        """
        s = settings.copy().validate()
        with self._lock:
            self._settings = s

    def reset(self) -> None:
        """Forget filter state (e.g. when the source changes)."""
        with self._lock:
            self._filters.clear()
            self._last_t = None
            self._lost_since = None

    # -- steps ---------------------------------------------------------------------
    @staticmethod
    def remap(w: np.ndarray, s: TuningSettings) -> np.ndarray:
        """Sensitivity then min/max remap: ``clip((w * gain - lo) / (hi - lo), 0, 1)``, (52,) float32."""
        x = np.asarray(w, np.float32) * s.sensitivity
        return clip((x - s.remap_min) / (s.remap_max - s.remap_min), 0.0, 1.0).astype(np.float32)

    @staticmethod
    def link_eyes(w: np.ndarray) -> np.ndarray:
        """Both eyes' blink, squint and wide become the mean of the two, (52,) float32."""
        w = w.copy()
        for a, b in _LINKED_EYES:
            m = 0.5 * (w[Blendshape[a]] + w[Blendshape[b]])
            w[Blendshape[a]] = w[Blendshape[b]] = m
        return w

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
            f = FrozenOneEuroFilter(min_cutoff_hz=cut, beta=beta)
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

    def _lost_face(self, w: np.ndarray, rot: np.ndarray, t: float, face_found: bool,
                   s: TuningSettings) -> tuple[np.ndarray, np.ndarray]:
        if face_found:
            self._lost_since = None
        elif self._lost_since is None:
            self._lost_since = t
        lost = self._lost_since is not None and t - self._lost_since >= self.lost_after_s
        # idle motion fades in over 1 s once lost and out over 0.3 s when the face returns
        dt = 0.0 if self._last_t is None else max(0.0, t - self._last_t)
        target = 1.0 if (lost and s.idle_motion) else 0.0
        if target > self._idle:
            self._idle = min(target, self._idle + dt / 1.0)
        else:
            self._idle = max(target, self._idle - dt / 0.3)
        if self._idle > 0:
            yaw = 0.07 * math.sin(2 * math.pi * t / 7.3) + 0.02 * math.sin(2 * math.pi * t / 3.1)
            pitch = 0.035 * math.sin(2 * math.pi * t / 5.3)
            roll = 0.025 * math.sin(2 * math.pi * t / 9.7)
            idle = rotation_from_euler(self._idle * yaw, self._idle * pitch, self._idle * roll)
            rot = (idle @ rot).astype(np.float32)
        if lost and s.auto_blink:
            if self._next_blink_t is None:
                self._next_blink_t = t + float(self._rng.uniform(0.5, 2.0))
            if self._blink_t0 is None and t >= self._next_blink_t:
                self._blink_t0 = t
            if self._blink_t0 is not None:
                p = t - self._blink_t0
                # 90 ms closing, 40 ms closed, 160 ms opening (a spontaneous blink lasts
                # ~0.1-0.4 s: Kwon et al., 2013, "High-speed camera characterization of
                # voluntary eye blinking kinematics", J. R. Soc. Interface 10: 20130227).
                if p < 0.09:
                    b = p / 0.09
                elif p < 0.13:
                    b = 1.0
                elif p < 0.29:
                    b = 1.0 - (p - 0.13) / 0.16
                else:
                    b = 0.0
                    self._blink_t0 = None
                    self._next_blink_t = t + float(self._rng.uniform(2.0, 6.0))
                for n in ("eyeBlinkLeft", "eyeBlinkRight"):
                    w[Blendshape[n]] = max(w[Blendshape[n]], b)
        else:
            self._blink_t0 = None
            self._next_blink_t = None
        return w, rot

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

    def _record(self, t: float, raw: np.ndarray, raw_rot, w: np.ndarray, rot: np.ndarray) -> None:
        def yaw(r):
            return float(euler_from_rotation(r)[0])

        before = {k: float(raw[i]) for k, i in self._preview_rows}
        after = {k: float(w[i]) for k, i in self._preview_rows}
        before["head"], after["head"] = yaw(raw_rot), yaw(rot)
        self.history.append((t, before, after))
        while self.history and t - self.history[0][0] > 10.0:
            self.history.popleft()

    def preview(self) -> list[tuple[float, dict[str, float], dict[str, float]]]:
        """A copy of :attr:`history` (raw and tuned values per region, see the class doc)."""
        with self._lock:
            return list(self.history)
