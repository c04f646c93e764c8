"""Tracking tuning: the user's post-processing of every AvatarState, live and offline alike.

The middle of the post-processing chain (:class:`avatar_app.fusion.chain.PostChain`),
run on the processing thread by the live pipeline and by offline rendering;
the time of every step is the frame's media time, so a video gives the same
avatar in the studio and in ``avatar-app render --settings``.

Order of the steps (each documented on its function):

1. per-shape sensitivity and min/max remap, on the user's own shapes
   (``w' = clip((w * sensitivity - lo) / (hi - lo), 0, 1)``);
2. per-region smoothing (eyes, brows, mouth, head) with the One Euro filter
   (Casiez, Roussel, Vogel, CHI 2012);
3. link eyes: both eyes' blink/squint/wide take the mean of the two (after the
   smoothing, so that they are equal from the first frame the option is on);
4. mirror (see :data:`MIRROR_CONVENTION`);
5. while the face is lost: auto-blink and a gentle idle motion;
6. expressions (hotkeys) layered over the result.

Mirror convention (:data:`MIRROR_CONVENTION`): with mirror OFF the avatar
is another person facing you, as a non-mirrored camera sees you: raise the LEFT
corner of your mouth (your own left) and the avatar raises ITS left corner,
which appears on the RIGHT of the picture. With mirror ON (the default) the
avatar is your reflection: raise your left corner and the corner on the LEFT
of the picture rises (the avatar's right, ``mouthSmileRight``); head yaw and
roll, gaze yaw and sideways position are mirrored too, pitch is not.
"""
from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from avatar_app.core.blendshapes import (
    BLENDSHAPE_NAMES,
    NUM_BLENDSHAPES,
    Blendshape,
    mirror_index,
)
from avatar_app.core.arrays import all_finite, clip
from avatar_app.core.errors import InputError, TrackingError
from avatar_app.core.rotations import (
    euler_from_rotation,
    euler_from_rows,
    nearest_rotation,
    rotation_from_euler,
)
from avatar_app.core.types import AvatarState, state_with
from avatar_app.fusion.expressions import (  # noqa: F401
    EXPRESSION_PRESETS,
    ExpressionLayer,
    format_mix,
    parse_mix,
)
from avatar_app.fusion.filters import one_euro_step

#: The documented mirror convention (see the module docstring).
MIRROR_CONVENTION = (
    "Mirror on: the avatar is your reflection - raise the left corner of your mouth and the "
    "corner on the left of the picture rises. Mirror off: the avatar faces you like another "
    "person - your left corner moves the avatar's left corner, on the right of the picture."
)

#: Smoothing regions -> the blendshapes they hold ("head" smooths the pose and gaze).
REGIONS: dict[str, tuple[str, ...]] = {
    "eyes": tuple(n for n in BLENDSHAPE_NAMES if n.startswith("eye")),
    "brows": tuple(n for n in BLENDSHAPE_NAMES if n.startswith("brow")),
    "mouth": tuple(n for n in BLENDSHAPE_NAMES if n.startswith(("jaw", "mouth", "cheek", "nose", "tongue"))),
    "head": (),
}
REGION_NAMES = tuple(REGIONS)

#: Default smoothing per region, 0..1 (0.5 = 3 Hz One Euro cut-off, as fusion's default;
#: 0.65 = 1.5 Hz for the head, as fusion's rotation filter).
DEFAULT_SMOOTHING: dict[str, float] = {"eyes": 0.4, "brows": 0.55, "mouth": 0.45, "head": 0.65}

_LINKED_EYES = (("eyeBlinkLeft", "eyeBlinkRight"), ("eyeSquintLeft", "eyeSquintRight"),
                ("eyeWideLeft", "eyeWideRight"))
_MIRROR = np.array(mirror_index())
_FLIP_X = np.diag([-1.0, 1.0, 1.0]).astype(np.float32)
_FLIP_TRANS = np.array([-1, 1, 1], np.float32)
_FLIP_GAZE = np.array([-1, 1], np.float32)

#: The One Euro filters of :meth:`AvatarTuner._smooth`, in the order they run: (key, smoothing
#: region, beta, slice of the stacked (66,) float64 vector: 52 weights, 9 rotation, 3 translation, 2 gaze).
#: The weights' regions are index arrays into the first 52 (eyes, brows, mouth cover all 52).
_W, _ROT, _TRANS, _GAZE = slice(0, 52), slice(52, 61), slice(61, 64), slice(64, 66)
_STACK = 66
_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))  # _record's fast yaw: widening to float64 is exact
#: ``1 / (2 pi d_cutoff)`` of the derivative's cut-off (1 Hz, OneEuroFilter's default).
_TAU_D = 1.0 / (2.0 * math.pi * 1.0)


def smoothing_cutoff_hz(amount: float) -> float:
    """One Euro minimum cut-off for a smoothing slider value.

    Args:
        amount: 0..1 (0 = off: the caller bypasses the filter).

    Returns:
        ``30 * 10 ** (-2 * amount)`` Hz: 0.5 -> 3 Hz, 1 -> 0.3 Hz.
    """
    return 30.0 * 10.0 ** (-2.0 * float(amount))


# ----------------------------------------------------------------------------- settings
@dataclass
class TuningSettings:
    """What the Tracking panel sets.

    Attributes:
        smoothing: region ("eyes", "brows", "mouth", "head") -> 0..1 (0 = off).
        sensitivity: (52,) float32 gain per shape (default 1).
        remap_min: (52,) float32 input weight that maps to 0 (default 0).
        remap_max: (52,) float32 input weight that maps to 1 (default 1).
        link_eyes: blink (and squint/widen) both eyes together (mean of the two).
        mirror: the avatar is your reflection (see :data:`MIRROR_CONVENTION`).
        auto_blink: blink every few seconds while the face is lost.
        idle_motion: a gentle head motion while the face is lost.
    """

    smoothing: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SMOOTHING))
    sensitivity: np.ndarray = field(default_factory=lambda: np.ones(NUM_BLENDSHAPES, np.float32))
    remap_min: np.ndarray = field(default_factory=lambda: np.zeros(NUM_BLENDSHAPES, np.float32))
    remap_max: np.ndarray = field(default_factory=lambda: np.ones(NUM_BLENDSHAPES, np.float32))
    link_eyes: bool = False
    mirror: bool = True
    auto_blink: bool = True
    idle_motion: bool = True

    def validate(self) -> "TuningSettings":
        """Check ranges; returns self.

        Raises:
            InputError: a value out of range (the message names it).
        """
        for region, v in self.smoothing.items():
            if region not in REGIONS:
                raise InputError(f"unknown smoothing region {region!r}; regions: {', '.join(REGIONS)}")
            if not 0.0 <= float(v) <= 1.0:
                raise InputError(f"smoothing of {region} must be between 0 and 1, got {v}")
        for name, arr in (("sensitivity", self.sensitivity), ("remap_min", self.remap_min),
                          ("remap_max", self.remap_max)):
            if np.shape(arr) != (NUM_BLENDSHAPES,) or not np.all(np.isfinite(arr)):
                raise InputError(f"{name} must be 52 finite numbers")
        if np.any(self.sensitivity < 0) or np.any(self.sensitivity > 5):
            raise InputError("sensitivity must be between 0 and 5")
        bad = np.nonzero(self.remap_max - self.remap_min < 0.01)[0]
        if len(bad):
            raise InputError(f"remap max must exceed min by 0.01 or more ({BLENDSHAPE_NAMES[bad[0]]})")
        return self

    def copy(self) -> "TuningSettings":
        """A deep copy."""
        return replace(self, smoothing=dict(self.smoothing), sensitivity=self.sensitivity.copy(),
                       remap_min=self.remap_min.copy(), remap_max=self.remap_max.copy())


def _float32_remap(s: TuningSettings) -> bool:
    """Whether remap's arrays are all float32 (then the tuner remaps in place, the same values)."""
    return all(np.asarray(a).dtype == np.float32 for a in (s.sensitivity, s.remap_min, s.remap_max))


# ----------------------------------------------------------------------------- the tuner
class AvatarTuner:
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
        # The six One Euro filters of _smooth stacked into one (66,) vector (see _SEGMENTS): their
        # values and derivatives, each filter's last time (absent: no filter, the next sample passes)
        # and cut-off, and the per-element cut-off and beta.
        self._x = np.zeros(_STACK)
        self._dx = np.zeros(_STACK)
        self._seg_t: dict[str, float] = {}
        self._filter_cut: dict[str, float] = {}
        self._min_cut = np.ones(_STACK)
        self._beta = np.zeros(_STACK)
        self._steady: tuple[float, ...] | None = None  # the cut-offs while every filter runs with one time
        self._steady_t = 0.0
        self._buf = np.empty(_STACK)
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
        self._preview_keys = [k for k, _ in self._preview_rows]
        self._preview_idx = np.array([i for _, i in self._preview_rows], np.intp)
        self._segments = [(r, r, 0.5, self._rows[r]) for r in ("eyes", "brows", "mouth")] + [
            ("head_rot", "head", 0.3, _ROT), ("head_trans", "head", 0.3, _TRANS), ("gaze", "eyes", 0.5, _GAZE)]
        for key, _, beta, idx in self._segments:
            self._beta[idx] = beta
        self._span = self._settings.remap_max - self._settings.remap_min
        self._remap_f32 = _float32_remap(self._settings)

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
            self._span = s.remap_max - s.remap_min
            self._remap_f32 = _float32_remap(s)

    def reset(self) -> None:
        """Forget filter state (e.g. when the source changes)."""
        with self._lock:
            self._seg_t.clear()
            self._steady = None
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
        w, rot, trans, gaze, vision, audio = AvatarTuner._mirrored(
            state.weights, state.rotation, state.translation, state.gaze, state.vision_weights, state.audio_weights)
        return replace(state, weights=w, rotation=rot, translation=trans, gaze=gaze,
                       vision_weights=vision, audio_weights=audio)

    @staticmethod
    def _mirrored(weights, rotation, translation, gaze, vision_weights, audio_weights):
        """:meth:`mirror` of a state's arrays: (weights, rotation, translation, gaze, vision, audio), new float32."""
        return (np.asarray(weights, np.float32)[_MIRROR],
                (_FLIP_X @ np.asarray(rotation, np.float32) @ _FLIP_X).astype(np.float32),
                np.asarray(translation, np.float32) * _FLIP_TRANS, np.asarray(gaze, np.float32) * _FLIP_GAZE,
                np.asarray(vision_weights, np.float32)[_MIRROR], np.asarray(audio_weights, np.float32)[_MIRROR])

    def _smooth(self, w: np.ndarray, rot: np.ndarray, trans: np.ndarray, gaze: np.ndarray,
                t: float, s: TuningSettings):
        """Per-region One Euro smoothing of (52,) float32 weights, (3, 3) rotation, (3,) translation and
        (2,) gaze (float64 in); float32 weights, rotation (nearest proper one), translation and gaze out.

        Six filters (eyes, brows, mouth weights, head rotation and translation, gaze), stacked into
        one (66,) vector: every element goes through the same operations as with one
        :class:`~avatar_app.fusion.filters.OneEuroFilter` per region (elementwise arithmetic only,
        :func:`~avatar_app.fusion.filters.one_euro_step`), so the result is bit-identical to it.
        While every filter runs with one time and unchanged cut-offs (the usual frame) the whole
        vector is one step; otherwise (first frame, a slider moved, a region off, a value not
        finite) each filter steps on its own part in the order above, as separate filters did.

        Raises:
            InputError: a filtered value or the time is not finite.
        """
        buf = self._buf
        buf[_W] = w
        buf[_ROT] = rot.reshape(9)
        buf[_TRANS] = trans
        buf[_GAZE] = gaze
        sm = s.smoothing
        eyes, brows, mouth, head = (sm.get("eyes", 0.0), sm.get("brows", 0.0), sm.get("mouth", 0.0),
                                    sm.get("head", 0.0))
        steady = self._steady
        if (steady is not None and eyes > 0.0 and brows > 0.0 and mouth > 0.0 and head > 0.0
                and steady == (eyes, brows, mouth, head) and math.isfinite(t) and all_finite(buf)):
            if not t > self._steady_t:  # as OneEuroFilter
                raise TrackingError(
                    f"One Euro filter timestamps must strictly increase: got {t} s after {self._steady_t} s")
            out, self._dx = one_euro_step(buf - self._x, self._x, self._dx, t - self._steady_t, _TAU_D,
                                          self._beta, self._min_cut)
            self._x = out
            self._steady_t = t
        else:
            out = self._smooth_each(buf, t, s)
        return (out[_W].astype(np.float32), nearest_rotation(out[_ROT].reshape(3, 3)).astype(np.float32),
                out[_TRANS].astype(np.float32), out[_GAZE].astype(np.float32))

    def _smooth_each(self, buf: np.ndarray, t: float, s: TuningSettings) -> np.ndarray:
        """:meth:`_smooth`'s filters one by one, in order, as separate OneEuroFilters ran (see there)."""
        seg_t, cuts = self._seg_t, self._filter_cut
        if self._steady is not None:  # leaving the one-time state: every filter had its time
            for key, *_ in self._segments:
                seg_t[key] = self._steady_t
            self._steady = None
        out = buf.copy()
        x, dx = self._x.copy(), self._dx.copy()  # written back filter by filter (a raise keeps the earlier)
        for key, region, _beta, idx in self._segments:
            amount = s.smoothing.get(region, 0.0)
            if amount <= 0.0:
                seg_t.pop(key, None)
                continue
            cut = smoothing_cutoff_hz(amount)
            if key not in seg_t or cuts.get(key) != cut:
                if key in seg_t and self._last_t is not None:
                    # a new filter holding the current value: no jump when the slider moves
                    dx[idx] = 0.0
                    seg_t[key] = self._last_t
                else:
                    seg_t.pop(key, None)
                cuts[key] = cut
                self._min_cut[idx] = cut
            if not math.isfinite(t):
                raise InputError(f"One Euro filter time must be finite, got {t}")
            xs = buf[idx]
            if not all_finite(xs):
                self._x, self._dx = x, dx
                raise InputError("One Euro filter input contains NaN or infinite values")
            t_prev = seg_t.get(key)
            if t_prev is None:  # a new filter: the first sample passes
                x[idx], dx[idx] = xs, 0.0
            else:
                if not t > t_prev:
                    self._x, self._dx = x, dx
                    raise TrackingError(
                        f"One Euro filter timestamps must strictly increase: got {t} s after {t_prev} s")
                x[idx], dx[idx] = one_euro_step(xs - x[idx], x[idx], dx[idx], t - t_prev, _TAU_D,
                                                self._beta[idx], self._min_cut[idx])
                out[idx] = x[idx]
            seg_t[key] = t
        self._x, self._dx = x, dx
        if len(seg_t) == len(self._segments):  # every filter on, all at time t: one step from the next frame
            self._steady = tuple(s.smoothing.get(r, 0.0) for r in ("eyes", "brows", "mouth", "head"))
            self._steady_t = t
            seg_t.clear()
        return out

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
            if self._remap_f32:  # remap's operations in place (float32 throughout: the same values)
                w = raw * s.sensitivity
                w -= s.remap_min
                w /= self._span
                clip(w, 0.0, 1.0, out=w)
            else:
                w = self.remap(raw, s)
            w, rot, trans, gaze = self._smooth(w, np.asarray(state.rotation, np.float64),
                                               np.asarray(state.translation, np.float64),
                                               np.asarray(state.gaze, np.float64), t, s)
            if s.link_eyes:  # after smoothing: the eyes are equal from the first frame it is on
                w = self.link_eyes(w)
            if s.mirror:
                w_out, rot_out, trans, gaze, vision, audio = self._mirrored(
                    w, rot, trans, gaze, state.vision_weights, state.audio_weights)
            else:
                w_out, rot_out, vision, audio = w.copy(), rot, state.vision_weights, state.audio_weights
            w2, rot2 = self._lost_face(w_out, rot_out, t, state.face_found, s)
            self._last_t = t
            self._record(t, raw, state.rotation, w, rot)
        w2 = self.expressions.apply(w2, t)
        clip(w2, 0.0, 1.0, out=w2)  # apply's own copy
        return state_with(state, weights=w2, rotation=rot2, translation=trans, gaze=gaze,
                          vision_weights=vision, audio_weights=audio)

    def _record(self, t: float, raw: np.ndarray, raw_rot, w: np.ndarray, rot: np.ndarray) -> None:
        def yaw(r):
            # r is finite here (_smooth raised otherwise: the filter's or nearest_rotation's check);
            # a (3, 3) float ndarray's rows are the doubles euler_from_rotation reads, without its check
            if isinstance(r, np.ndarray) and r.shape == (3, 3) and r.dtype in _F32_F64:
                return euler_from_rows(r.tolist())[0]
            return float(euler_from_rotation(r)[0])

        keys, rows = self._preview_keys, self._preview_idx
        # one gather per array: float32 -> Python float, the values float(raw[i]) gave
        before = dict(zip(keys, raw[rows].tolist()))
        after = dict(zip(keys, w[rows].tolist()))
        before["head"], after["head"] = yaw(raw_rot), yaw(rot)
        self.history.append((t, before, after))
        while self.history and t - self.history[0][0] > 10.0:
            self.history.popleft()

    def preview(self) -> list[tuple[float, dict[str, float], dict[str, float]]]:
        """A copy of :attr:`history` (raw and tuned values per region, see the class doc)."""
        with self._lock:
            return list(self.history)
