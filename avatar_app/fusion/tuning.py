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
from avatar_app.core.arrays import clip
from avatar_app.core.errors import InputError
from avatar_app.core.rotations import (
    euler_from_rotation,
    nearest_rotation,
    rotation_from_euler,
)
from avatar_app.core.types import AvatarState
from avatar_app.fusion.expressions import (  # noqa: F401
    EXPRESSION_PRESETS,
    ExpressionLayer,
    format_mix,
    parse_mix,
)
from avatar_app.fusion.filters import OneEuroFilter

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
        self._filters: dict[str, OneEuroFilter] = {}
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
