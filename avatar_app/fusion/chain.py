"""The post-processing chain of every frame, the same in the studio and in offline rendering.

Order (each step documented on its own module):

1. mouth fusion of vision and audio weights and the sanity guard
   (:class:`~avatar_app.fusion.mouth.Fusion`, smoothing off);
2. tuning (:class:`~avatar_app.fusion.tuning.AvatarTuner`): sensitivity and
   min/max remap, link eyes, per-region One Euro smoothing, mirror, auto-blink
   and idle motion while the face is lost;
3. expressions (:class:`~avatar_app.fusion.expressions.ExpressionLayer`).

Every step runs on the frame's media time, so the same frames with the same
settings give the same states whatever the thread or the wall clock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from avatar_app.core.types import AvatarState, FaceParams
from avatar_app.fusion.expressions import ExpressionLayer
from avatar_app.fusion.mouth import Fusion, FusionSettings
from avatar_app.fusion.tuning import AvatarTuner, TuningSettings

log = logging.getLogger(__name__)


@dataclass
class ChainSettings:
    """Everything the chain's look depends on (the studio's Tracking and Expressions panels).

    Attributes:
        fusion: mouth fusion parameters (smoothing is the tuner's, per region).
        tuning: sensitivity, remap, smoothing, mirror, link eyes, lost-face behaviour.
        expressions: expression name -> blendshape -> target weight, for expressions
            other than the built-in presets (the studio's "custom" mix).
    """

    fusion: FusionSettings = field(default_factory=FusionSettings)
    tuning: TuningSettings = field(default_factory=TuningSettings)
    expressions: dict[str, dict[str, float]] = field(default_factory=dict)


class PostChain:
    """Fusion, tuning and expressions of one stream of frames (see the module docstring).

    Args:
        settings: the chain's settings (default: a fresh studio's).
        expressions: the ExpressionLayer to use (the studio shares it with its hotkeys);
            default a new one with ``settings.expressions`` defined.

    Attributes:
        fusion: the :class:`Fusion` step (its ``settings`` may be changed between frames).
        tuner: the :class:`AvatarTuner` step.
        expressions: the :class:`ExpressionLayer` (the tuner's last step).

    Thread: :meth:`fuse` and :meth:`tune` on one processing thread; settings from any.
    """

    def __init__(self, settings: ChainSettings | None = None, expressions: ExpressionLayer | None = None):
        settings = settings or ChainSettings()
        self.fusion = Fusion(replace(settings.fusion, smoothing=False))
        self.expressions = expressions or ExpressionLayer()
        for name, mix in settings.expressions.items():
            self.expressions.set_mix(name, mix)
        self.tuner = AvatarTuner(settings.tuning, self.expressions)

    def reset(self) -> None:
        """Forget the filters' state (a new source)."""
        self.fusion.reset()
        self.tuner.reset()

    def fuse(self, vision: FaceParams, audio: np.ndarray, face_found: bool,
             t_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step 1: see :meth:`Fusion.fuse` (weights (52,), rotation (3, 3), translation (3,) float32)."""
        return self.fusion.fuse(vision, audio, face_found, t_s)

    def tune(self, state: AvatarState) -> AvatarState:
        """Steps 2 and 3 on a fused state (time: ``state.media_time_s``); a new AvatarState."""
        return self.tuner(state)
