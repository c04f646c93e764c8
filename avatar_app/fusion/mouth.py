"""Fusion of vision and audio blendshapes, smoothing and the sanity guard.

Vision gives the whole face; audio gives mouth/jaw weights. Per blendshape:

- while the face is tracked, audio refines the vision mouth: each mouth shape
  moves from the vision value toward the audio value by
  ``audio_mix * AUDIO_TRUST[shape] * activity`` (``audio_mix`` 0..1 is the
  user's setting; :data:`AUDIO_TRUST` says how much audio knows about each
  shape: much about lip closure, rounding and the tongue, some about jaw
  opening, little about smiles and nothing about sideways motions;
  ``activity`` is 0 while the audio drive is silent, so silence never pulls an
  open mouth shut); the shapes that part or close the lips (jawOpen,
  mouthClose, mouthFunnel, mouthLowerDown/UpperUp, mouthPress, mouthRoll) stay
  vision's while the mouth is in view, so fusion never closes a mouth the
  camera sees open nor opens one it sees closed (measured by
  :mod:`avatar_app.evaluation.mouth`: with the voice adding to the opening the
  lip-gap correlation fell below vision's on 5 of 6 real clips);
- a mouth that vision sees closed (vision jawOpen below
  ``closed_jaw``) suppresses the audio drive, fading back in up to
  ``open_jaw``: speech from other people or loudspeakers does not open a
  closed mouth;
- while the face is lost, or the user marks the mouth as covered
  (``mouth_covered``, e.g. behind a microphone arm), audio drives the mouth
  alone.

Smoothing is the One Euro filter (Casiez, Roussel, Vogel, CHI 2012).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatar_app.core.arrays import all_finite, clip
from avatar_app.core.blendshapes import (
    BLENDSHAPE_NAMES,
    MOUTH_BLENDSHAPES,
    NUM_BLENDSHAPES,
)
from avatar_app.core.rotations import nearest_rotation
from avatar_app.core.types import FaceParams
from avatar_app.fusion.filters import OneEuroFilter

_MOUTH_MASK = np.array([n in MOUTH_BLENDSHAPES for n in BLENDSHAPE_NAMES])
_JAW = BLENDSHAPE_NAMES.index("jawOpen")
#: Shapes that part or close the lips: vision alone sets them while the mouth is in view.
_APERTURE = np.array([n in ("jawOpen", "mouthClose", "mouthFunnel")
                      or n.startswith(("mouthLowerDown", "mouthUpperUp", "mouthPress", "mouthRoll"))
                      for n in BLENDSHAPE_NAMES])


def _trust(name: str) -> float:
    if name in ("mouthClose", "tongueOut") or name.startswith(("mouthPress", "mouthRoll")):
        return 1.0
    if name in ("mouthFunnel", "mouthPucker") or name.startswith(("mouthLowerDown", "mouthUpperUp")):
        return 0.8
    if name == "jawOpen" or name.startswith("mouthShrug"):
        return 0.6
    if name.startswith(("mouthSmile", "mouthStretch")):
        return 0.3
    return 0.0  # sideways jaw/mouth, frown, dimple, cheeks: audio does not know them


#: (52,) float32: how far audio may pull each mouth shape from vision at audio_mix 1
#: (0 outside the mouth). Closure, rounding and tongue are audible but hard to see
#: precisely; jaw opening is both; smiles and sideways motions are seen, not heard.
AUDIO_TRUST: np.ndarray = np.array(
    [_trust(n) if m else 0.0 for n, m in zip(BLENDSHAPE_NAMES, _MOUTH_MASK)], np.float32)


_MOUTH_ROWS = np.flatnonzero(_MOUTH_MASK)
_MOUTH_TRUST = AUDIO_TRUST[_MOUTH_ROWS]
_MOUTH_APERTURE = np.flatnonzero(_APERTURE[_MOUTH_ROWS])


@dataclass
class FusionSettings:
    """Tunable fusion parameters.

    Attributes:
        audio_mix: 0..1, how much audio refines the vision mouth while the face is tracked.
        mouth_covered: the user marked the mouth as covered (microphone arm, hand):
            audio drives the mouth alone even while the face is tracked.
        closed_jaw: vision jawOpen at or below which the mouth counts as seen
            closed (audio drive fully suppressed).
        open_jaw: vision jawOpen at or above which the audio drive is not
            suppressed at all (linear in between).
        activity_level: sum of the audio mouth weights at which the audio
            refinement reaches full strength (less: proportionally weaker).
        smoothing: apply One Euro smoothing to the fused weights and pose.
        min_cutoff_hz: One Euro minimum cutoff (Hz); lower = smoother at rest.
        beta: One Euro speed coefficient; higher = less lag on fast motion.
    """

    audio_mix: float = 0.5
    mouth_covered: bool = False
    closed_jaw: float = 0.04
    open_jaw: float = 0.12
    activity_level: float = 0.15
    smoothing: bool = True
    min_cutoff_hz: float = 3.0
    beta: float = 0.5


def fuse_mouth(vision: np.ndarray, audio: np.ndarray, face_found: bool,
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
        w[_MOUTH_ROWS] = a[_MOUTH_ROWS]
        return w
    # The mouth's shapes only (ascending indices: the same elements in the same order as the mask,
    # so the activity's sum and every weight are bit-identical to the whole-array formulas).
    span = max(settings.open_jaw - settings.closed_jaw, 1e-6)
    seen_open = float(clip((v[_JAW] - settings.closed_jaw) / span, 0.0, 1.0))
    a_eff = a[_MOUTH_ROWS] * seen_open
    activity = float(clip(a_eff.sum() / max(settings.activity_level, 1e-6), 0.0, 1.0))
    mix = float(clip(settings.audio_mix, 0.0, 1.0))
    k = mix * activity * _MOUTH_TRUST
    # How far the lips are apart is what the camera sees best: while the mouth is in view the
    # voice never changes it (it neither closes a mouth seen open nor opens one seen closed).
    k[_MOUTH_APERTURE] = 0.0
    vm = v[_MOUTH_ROWS]
    a_eff -= vm
    a_eff *= k
    a_eff += vm
    w[_MOUTH_ROWS] = a_eff
    return w


class Fusion:
    """Combines vision FaceParams and audio weights into final weights and pose.

    Args:
        settings: FusionSettings (mutable: the UI may change it between frames).

    Attributes:
        mouth: the per-blendshape mouth fusion :meth:`fuse` calls (:func:`fuse_mouth`).
    """

    mouth = staticmethod(fuse_mouth)

    def __init__(self, settings: FusionSettings | None = None):
        self.settings = settings or FusionSettings()
        self._w_filter: OneEuroFilter | None = None
        self._r_filter: OneEuroFilter | None = None
        self._t_filter: OneEuroFilter | None = None

    def reset(self) -> None:
        """Forget the smoothing state (e.g. when the source changes)."""
        self._w_filter = self._r_filter = self._t_filter = None

    def _filters(self):
        s = self.settings
        if self._w_filter is None:
            self._w_filter = OneEuroFilter(min_cutoff_hz=s.min_cutoff_hz, beta=s.beta)
            self._r_filter = OneEuroFilter(min_cutoff_hz=1.5, beta=0.3)
            self._t_filter = OneEuroFilter(min_cutoff_hz=1.0, beta=0.3)
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
        w = self.mouth(v, a, face_found, self.settings)
        rot = np.asarray(vision.rotation, np.float32)
        trans = np.asarray(vision.translation, np.float32)
        if self.settings.smoothing:
            fw, fr, ft = self._filters()
            w = fw(w, t_s)
            rot = nearest_rotation(fr(rot, t_s)).astype(np.float32)
            trans = ft(trans, t_s)
        # sanity guard: finite and in range, else neutral
        if not all_finite(w):
            w = np.zeros(NUM_BLENDSHAPES, np.float32)
        if not (all_finite(rot) and all_finite(trans)):
            rot = np.eye(3, dtype=np.float32)
            trans = np.array([0, 0, -0.6], np.float32)
        return clip(w, 0.0, 1.0).astype(np.float32, copy=False), rot, trans
