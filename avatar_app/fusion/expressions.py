"""Expressions: presets and the user's own mix, triggered or held by hotkeys, layered over tracking.

The last step of the post-processing chain (:mod:`avatar_app.fusion.chain`):
each active expression pulls the shapes it lists toward its target weight by
its amount, which ramps in over ``attack_s`` and out over ``release_s``; shapes
it does not list keep tracking.
"""
from __future__ import annotations

import threading

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import InputError

#: Built-in expressions: blendshape -> target weight. Shapes listed are pulled toward the
#: target by the expression's amount; shapes not listed keep tracking.
EXPRESSION_PRESETS: dict[str, dict[str, float]] = {
    "happy": {"mouthSmileLeft": 0.9, "mouthSmileRight": 0.9, "cheekSquintLeft": 0.6,
              "cheekSquintRight": 0.6, "eyeSquintLeft": 0.35, "eyeSquintRight": 0.35,
              "mouthFrownLeft": 0.0, "mouthFrownRight": 0.0, "browDownLeft": 0.0, "browDownRight": 0.0,
              "jawOpen": 0.15},
    "angry": {"browDownLeft": 1.0, "browDownRight": 1.0, "noseSneerLeft": 0.6, "noseSneerRight": 0.6,
              "mouthFrownLeft": 0.6, "mouthFrownRight": 0.6, "mouthPressLeft": 0.5,
              "mouthPressRight": 0.5, "eyeSquintLeft": 0.5, "eyeSquintRight": 0.5,
              "mouthSmileLeft": 0.0, "mouthSmileRight": 0.0, "browInnerUp": 0.0},
    "surprised": {"browInnerUp": 1.0, "browOuterUpLeft": 1.0, "browOuterUpRight": 1.0,
                  "eyeWideLeft": 0.9, "eyeWideRight": 0.9, "jawOpen": 0.55, "mouthFunnel": 0.3,
                  "browDownLeft": 0.0, "browDownRight": 0.0, "eyeBlinkLeft": 0.0, "eyeBlinkRight": 0.0},
    "sad": {"browInnerUp": 0.9, "browDownLeft": 0.0, "browDownRight": 0.0, "mouthFrownLeft": 0.8,
            "mouthFrownRight": 0.8, "mouthShrugLower": 0.5, "mouthPucker": 0.15,
            "mouthSmileLeft": 0.0, "mouthSmileRight": 0.0, "eyeLookDownLeft": 0.3,
            "eyeLookDownRight": 0.3},
}


def parse_mix(text: str) -> dict[str, float]:
    """Parse a custom expression such as ``"jawOpen=0.6, tongueOut=1"``.

    Args:
        text: ``name=weight`` pairs separated by commas, semicolons or spaces;
            names are ARKit blendshape names (case-insensitive), weights 0..1.

    Returns:
        blendshape name -> weight.

    Raises:
        InputError: an unknown name, a missing ``=`` or a weight outside 0..1.
    """
    lower = {n.lower(): n for n in BLENDSHAPE_NAMES}
    out: dict[str, float] = {}
    for item in text.replace(";", ",").replace(" ", ",").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise InputError(f"'{item}' is not name=weight (e.g. jawOpen=0.6)")
        name, value = (s.strip() for s in item.split("=", 1))
        if name.lower() not in lower:
            raise InputError(f"'{name}' is not an ARKit blendshape name (e.g. jawOpen, mouthSmileLeft)")
        try:
            w = float(value)
        except ValueError:
            raise InputError(f"'{value}' is not a number (weight of {name})") from None
        if not 0.0 <= w <= 1.0:
            raise InputError(f"the weight of {name} must be between 0 and 1, got {w}")
        out[lower[name.lower()]] = w
    return out


def format_mix(mix: dict[str, float]) -> str:
    """Inverse of :func:`parse_mix`: ``"jawOpen=0.6, tongueOut=1"``."""
    return ", ".join(f"{k}={v:g}" for k, v in mix.items())


class ExpressionLayer:
    """Expressions triggered or held by hotkeys, ramped in and out over time.

    Args:
        attack_s: seconds for an expression to fade fully in.
        release_s: seconds to fade out.

    Thread: ``press``/``release``/``set_mix`` from the GUI thread, ``apply`` from
    the processing thread (guarded by a lock).
    """

    def __init__(self, attack_s: float = 0.12, release_s: float = 0.25):
        self.attack_s = float(attack_s)
        self.release_s = float(release_s)
        self._lock = threading.Lock()
        self._mixes: dict[str, dict[str, float]] = {k: dict(v) for k, v in EXPRESSION_PRESETS.items()}
        self._target: dict[str, float] = {}
        self._amount: dict[str, float] = {}
        self._t_s: float | None = None

    def set_mix(self, name: str, mix: dict[str, float]) -> None:
        """Define (or redefine) expression ``name`` as blendshape -> target weight."""
        idx = {k: v for k, v in mix.items() if k in BLENDSHAPE_NAMES}
        with self._lock:
            self._mixes[name] = idx

    def mixes(self) -> dict[str, dict[str, float]]:
        """Copy of every defined expression."""
        with self._lock:
            return {k: dict(v) for k, v in self._mixes.items()}

    def set_active(self, name: str, on: bool) -> None:
        """Start (``on``) or stop fading expression ``name`` in."""
        with self._lock:
            if on:
                self._target[name] = 1.0
            else:
                self._target.pop(name, None)

    def toggle(self, name: str) -> bool:
        """Switch ``name`` on or off; returns whether it is now on."""
        on = not self.is_active(name)
        self.set_active(name, on)
        return on

    def is_active(self, name: str) -> bool:
        """Whether ``name`` is on (fading in or held)."""
        with self._lock:
            return name in self._target

    def clear(self) -> None:
        """Switch every expression off (they fade out)."""
        with self._lock:
            self._target.clear()

    def amounts(self) -> dict[str, float]:
        """Current amount (0..1) of every expression that is not fully off."""
        with self._lock:
            return dict(self._amount)

    def apply(self, weights: np.ndarray, t_s: float) -> np.ndarray:
        """Advance the ramps to ``t_s`` and layer the expressions over ``weights``.

        Args:
            weights: (52,) float32 tracked weights.
            t_s: time, seconds (process clock); a jump back restarts the ramps' clock.

        Returns:
            (52,) float32 weights: for each active expression and each shape it
            lists, ``w += amount * (target - w)``.
        """
        with self._lock:
            dt = 0.0 if self._t_s is None or t_s < self._t_s else t_s - self._t_s
            self._t_s = t_s
            names = set(self._amount) | set(self._target)
            for name in names:
                a = self._amount.get(name, 0.0)
                if name in self._target:
                    a = min(1.0, a + (dt / self.attack_s if self.attack_s > 0 else 1.0))
                else:
                    a = max(0.0, a - (dt / self.release_s if self.release_s > 0 else 1.0))
                if a > 0.0 or name in self._target:
                    self._amount[name] = a
                else:
                    self._amount.pop(name, None)
            layers = [(self._mixes.get(n, {}), a) for n, a in self._amount.items() if a > 0]
        w = np.asarray(weights, np.float32).copy()
        for mix, a in layers:
            for shape, target in mix.items():
                i = Blendshape[shape]
                w[i] += a * (target - w[i])
        return w
