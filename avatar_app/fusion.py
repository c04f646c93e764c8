"""Fusion of vision and audio blendshapes, smoothing and the sanity guard.

Vision gives the whole face; audio gives mouth/jaw weights. While the face is
tracked, audio refines the vision mouth by ``audio_mix`` (0 = vision only,
1 = the larger of the two); while the face is lost, audio drives the mouth
alone. Smoothing is the One Euro filter (Casiez, Roussel, Vogel, CHI 2012).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, MOUTH_BLENDSHAPES, NUM_BLENDSHAPES
from avatar_app.core.types import FaceParams
from avatar_app.tracking.filters import OneEuroFilter

_MOUTH_MASK = np.array([n in MOUTH_BLENDSHAPES for n in BLENDSHAPE_NAMES])


@dataclass
class FusionSettings:
    """Tunable fusion parameters.

    Attributes:
        audio_mix: 0..1, how much audio refines the vision mouth while the face is tracked.
        smoothing: apply One Euro smoothing to the fused weights and pose.
        min_cutoff_hz: One Euro minimum cutoff (Hz); lower = smoother at rest.
        beta: One Euro speed coefficient; higher = less lag on fast motion.
    """

    audio_mix: float = 0.5
    smoothing: bool = True
    min_cutoff_hz: float = 3.0
    beta: float = 0.5


def orthonormalise(m: np.ndarray) -> np.ndarray:
    """Nearest rotation matrix to a (3, 3) float matrix (SVD, det +1)."""
    u, _, vt = np.linalg.svd(m.astype(np.float64))
    r = u @ vt
    if np.linalg.det(r) < 0:
        u[:, -1] *= -1
        r = u @ vt
    return r.astype(np.float32)


class Fusion:
    """Combines vision FaceParams and audio weights into final weights and pose.

    Args:
        settings: FusionSettings (mutable: the UI may change it between frames).
    """

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
        w = v.copy()
        if face_found:
            mix = float(np.clip(self.settings.audio_mix, 0.0, 1.0))
            w[_MOUTH_MASK] = (1 - mix) * v[_MOUTH_MASK] + mix * np.maximum(v[_MOUTH_MASK], a[_MOUTH_MASK])
        else:
            w[_MOUTH_MASK] = np.maximum(v[_MOUTH_MASK], a[_MOUTH_MASK])
        rot = np.asarray(vision.rotation, np.float32)
        trans = np.asarray(vision.translation, np.float32)
        if self.settings.smoothing:
            fw, fr, ft = self._filters()
            w = fw(w, t_s)
            rot = orthonormalise(fr(rot, t_s))
            trans = ft(trans, t_s)
        # sanity guard: finite and in range, else neutral
        if not np.all(np.isfinite(w)):
            w = np.zeros(NUM_BLENDSHAPES, np.float32)
        if not (np.all(np.isfinite(rot)) and np.all(np.isfinite(trans))):
            rot = np.eye(3, dtype=np.float32)
            trans = np.array([0, 0, -0.6], np.float32)
        return np.clip(w, 0.0, 1.0).astype(np.float32), rot, trans
