"""Seeded samplers of expressions, face shapes, head poses and cameras for face_recon training data.

Expressions are sampled the way people combine blendshapes, not as 52
independent uniforms: each face draws one state per region (eyes, gaze,
brows, mouth, cheeks/nose, jaw), each state activating a few correlated
shapes, mostly symmetric with asymmetric variants:

- eyes: open / bilateral blink (half of them fully shut) / wink / squint /
  wide, independent small squint noise per eye;
- gaze: both eyes turn together (eyeLookIn of one eye = eyeLookOut of the
  other), with a little vergence noise;
- brows: rest / raised inner / raised outer / lowered, sometimes one-sided;
- mouth: rest / speech (a jaw opening plus one viseme-like lip shape: round,
  closed, pressed, rolled, stretched, lips apart) / emotion (smile with
  cheek squint, frown, stretch, dimple, sneer) / sparse random (any mouth
  shape at random, for coverage);
- jaw sideways or forward, cheek puff, tongue out: rare.

Constraints: mouthClose <= jawOpen (ARKit: lips closed over an open jaw),
eyeWide and eyeBlink of one eye are not both large, gaze In/Out exclusive.
"""
from __future__ import annotations

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES

IDX = {n: i for i, n in enumerate(BLENDSHAPE_NAMES)}
#: Yaw, pitch, roll ranges of the issue: +-60, +-40, +-30 degrees.
POSE_LIMITS_DEG = (60.0, 40.0, 30.0)


def _set(w: np.ndarray, name: str, value) -> None:
    w[IDX[name]] = np.clip(value, 0.0, 1.0)


def _sym(rng, base: float, asym: float = 0.15) -> tuple[float, float]:
    """A (left, right) pair around ``base`` with a relative asymmetry."""
    d = rng.normal(0.0, asym) * base
    return base + d, base - d


def _sample_eyes(rng, w):
    mode = rng.choice(5, p=[0.42, 0.28, 0.10, 0.10, 0.10])
    if mode == 1:  # bilateral blink, half of them fully closed
        v = 1.0 - rng.beta(1.0, 8.0) if rng.random() < 0.5 else rng.random()
        left, right = _sym(rng, v, 0.08)
        _set(w, "eyeBlinkLeft", left), _set(w, "eyeBlinkRight", right)
    elif mode == 2:  # wink
        side, other = ("Left", "Right") if rng.random() < 0.5 else ("Right", "Left")
        _set(w, f"eyeBlink{side}", 1.0 - rng.beta(1.0, 5.0))
        _set(w, f"eyeBlink{other}", rng.random() * 0.15)
        _set(w, f"eyeSquint{other}", rng.random() * 0.4)
        _set(w, f"cheekSquint{side}", rng.random() * 0.5)
    elif mode == 3:  # squint
        left, right = _sym(rng, rng.random(), 0.2)
        _set(w, "eyeSquintLeft", left), _set(w, "eyeSquintRight", right)
        if rng.random() < 0.4:
            b = rng.random() * 0.4
            _set(w, "eyeBlinkLeft", b), _set(w, "eyeBlinkRight", b)
    elif mode == 4:  # wide
        left, right = _sym(rng, rng.random(), 0.15)
        _set(w, "eyeWideLeft", left), _set(w, "eyeWideRight", right)
    for side in ("Left", "Right"):
        if rng.random() < 0.2:
            w[IDX[f"eyeSquint{side}"]] = max(w[IDX[f"eyeSquint{side}"]], rng.random() * 0.4)
        if w[IDX[f"eyeBlink{side}"]] > 0.3:
            w[IDX[f"eyeWide{side}"]] = 0.0


def _sample_gaze(rng, w):
    if rng.random() < 0.35:
        return
    yaw = rng.uniform(-1.0, 1.0) if rng.random() < 0.7 else 0.0  # +: toward the subject's left
    pitch = rng.uniform(-1.0, 1.0) if rng.random() < 0.6 else 0.0
    for side, sign in (("Left", 1.0), ("Right", -1.0)):
        y = yaw + rng.normal(0, 0.05)
        p = pitch + rng.normal(0, 0.05)
        out, inn = (max(y, 0), max(-y, 0)) if sign > 0 else (max(-y, 0), max(y, 0))
        _set(w, f"eyeLookOut{side}", out), _set(w, f"eyeLookIn{side}", inn)
        _set(w, f"eyeLookUp{side}", max(p, 0)), _set(w, f"eyeLookDown{side}", max(-p, 0))


def _sample_brows(rng, w):
    mode = rng.choice(5, p=[0.4, 0.2, 0.15, 0.15, 0.1])
    if mode == 1:
        _set(w, "browInnerUp", rng.random())
        if rng.random() < 0.5:
            left, right = _sym(rng, rng.random(), 0.2)
            _set(w, "browOuterUpLeft", left), _set(w, "browOuterUpRight", right)
    elif mode == 2:
        left, right = _sym(rng, rng.random(), 0.2)
        _set(w, "browOuterUpLeft", left), _set(w, "browOuterUpRight", right)
    elif mode == 3:
        left, right = _sym(rng, rng.random(), 0.2)
        _set(w, "browDownLeft", left), _set(w, "browDownRight", right)
        if rng.random() < 0.3:
            _set(w, "browInnerUp", rng.random() * 0.5)
    elif mode == 4:  # one-sided
        side = "Left" if rng.random() < 0.5 else "Right"
        _set(w, f"browOuterUp{side}" if rng.random() < 0.5 else f"browDown{side}", rng.random())


_SPEECH_SHAPES = (
    ("mouthFunnel",), ("mouthPucker",), ("mouthClose",), ("mouthPressLeft", "mouthPressRight"),
    ("mouthRollLower",), ("mouthRollUpper",), ("mouthRollLower", "mouthRollUpper"),
    ("mouthStretchLeft", "mouthStretchRight"), ("mouthLowerDownLeft", "mouthLowerDownRight"),
    ("mouthUpperUpLeft", "mouthUpperUpRight"), ("mouthShrugLower",), ("mouthShrugUpper",),
    ("mouthSmileLeft", "mouthSmileRight"), (),
)
_MOUTH_ALL = [n for n in BLENDSHAPE_NAMES if n.startswith("mouth")]


def _sample_mouth(rng, w):
    mode = rng.choice(4, p=[0.25, 0.40, 0.20, 0.15])
    if mode == 1:  # speech: jaw + one viseme-like lip shape (+ maybe a second)
        _set(w, "jawOpen", rng.random() * 0.8 if rng.random() < 0.85 else 0.0)
        for _ in range(1 + int(rng.random() < 0.3)):
            names = _SPEECH_SHAPES[rng.integers(len(_SPEECH_SHAPES))]
            v = rng.random()
            for n in names:
                _set(w, n, v * (1.0 + rng.normal(0, 0.1)))
    elif mode == 2:  # emotion
        kind = rng.choice(5, p=[0.45, 0.2, 0.15, 0.1, 0.1])
        v = rng.random()
        if rng.random() < 0.25:  # one-sided
            side = "Left" if rng.random() < 0.5 else "Right"
            pairs = {0: ("mouthSmile",), 1: ("mouthFrown",), 2: ("mouthStretch",),
                     3: ("mouthDimple",), 4: ("noseSneer", "mouthUpperUp")}[kind]
            for p in pairs:
                _set(w, p + side, v)
        else:
            left, right = _sym(rng, v, 0.15)
            names = {0: ("mouthSmile",), 1: ("mouthFrown",), 2: ("mouthStretch",),
                     3: ("mouthDimple",), 4: ("noseSneer",)}[kind]
            for n in names:
                _set(w, n + "Left", left), _set(w, n + "Right", right)
            if kind == 0:
                c = v * rng.random()
                _set(w, "cheekSquintLeft", c), _set(w, "cheekSquintRight", c)
                if rng.random() < 0.5:
                    _set(w, "jawOpen", rng.random() * 0.5)
            if kind == 1 and rng.random() < 0.5:
                _set(w, "mouthShrugLower", rng.random())
    elif mode == 3:  # sparse random mouth shapes
        for n in _MOUTH_ALL:
            if rng.random() < 0.12:
                _set(w, n, rng.random())
        if rng.random() < 0.5:
            _set(w, "jawOpen", rng.random())
    w[IDX["mouthClose"]] = min(w[IDX["mouthClose"]], w[IDX["jawOpen"]])


def _sample_rest(rng, w):
    if rng.random() < 0.06:
        _set(w, "jawLeft" if rng.random() < 0.5 else "jawRight", rng.random())
    if rng.random() < 0.05:
        _set(w, "jawForward", rng.random())
    if rng.random() < 0.04:
        _set(w, "cheekPuff", rng.random())
    if rng.random() < 0.05:
        left, right = _sym(rng, rng.random(), 0.2)
        _set(w, "noseSneerLeft", max(w[IDX["noseSneerLeft"]], left))
        _set(w, "noseSneerRight", max(w[IDX["noseSneerRight"]], right))
    if rng.random() < 0.04:
        _set(w, "tongueOut", rng.random())
        w[IDX["jawOpen"]] = max(w[IDX["jawOpen"]], 0.2 + 0.4 * rng.random())
    if rng.random() < 0.04:
        side = "Left" if rng.random() < 0.5 else "Right"
        _set(w, f"mouth{side}", rng.random())


#: Default share of faces scaled down to a small expression by :func:`sample_expressions`, and
#: the range of the scale. Real footage is mostly small motion (speech opens the jaw 0.05-0.3,
#: a polite smile is 0.1-0.2 of a full one): without these the engine learned a dead zone and
#: answered 0 on the London smile and on much of the GRID speech (see training/face_recon/README.md).
SMALL_SHARE, SMALL_SCALE = 0.4, (0.1, 0.6)


def sample_expressions(rng: np.random.Generator, n: int, small_share: float = 0.0,
                       small_scale: tuple[float, float] = SMALL_SCALE) -> np.ndarray:
    """Draw blendshape weight vectors.

    Args:
        rng: numpy Generator (the seed makes the data reproducible).
        n: number of samples.
        small_share: share of the faces whose whole weight vector is then multiplied by one
            factor drawn uniformly from ``small_scale`` (small expressions; train.py uses
            :data:`SMALL_SHARE`; 0 keeps the draws of the render-and-track files unchanged).
        small_scale: (low, high) of that factor.

    Returns:
        (n, 52) float32 in [0, 1], ARKit order. About 5 % are all zero.
    """
    out = np.zeros((n, NUM_BLENDSHAPES), np.float32)
    for i in range(n):
        if rng.random() < 0.05:
            continue
        w = out[i]
        _sample_eyes(rng, w)
        _sample_gaze(rng, w)
        _sample_brows(rng, w)
        _sample_mouth(rng, w)
        _sample_rest(rng, w)
    if small_share > 0:
        m = rng.random(n) < small_share
        out[m] *= rng.uniform(small_scale[0], small_scale[1], (int(m.sum()), 1)).astype(np.float32)
    return out


def sample_identity(rng: np.random.Generator, n: int, k: int, sd: float = 0.5) -> np.ndarray:
    """(n, k) float32 identity coefficients ~ N(0, sd), clipped to +-1.5."""
    return np.clip(rng.normal(0.0, sd, (n, k)), -1.5, 1.5).astype(np.float32)


def sample_pose_deg(rng: np.random.Generator, n: int, limits=POSE_LIMITS_DEG, wide: float = 0.4
                    ) -> np.ndarray:
    """(n, 3) float64 (yaw, pitch, roll) in degrees.

    A share ``wide`` is uniform over +-limits; the rest normal with sd = limit / 3
    (clipped), since people mostly face their screen.
    """
    lim = np.asarray(limits, np.float64)
    uni = rng.uniform(-1, 1, (n, 3)) * lim
    nor = np.clip(rng.normal(0, 1 / 3, (n, 3)), -1, 1) * lim
    return np.where(rng.random((n, 1)) < wide, uni, nor)


def sample_neutral_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 52) float32 weights of a 'relaxed' neutral face: mostly 0, a little lid/lip tone."""
    w = np.zeros((n, NUM_BLENDSHAPES), np.float32)
    for name, p, top in (("eyeBlinkLeft", 0.3, 0.08), ("eyeSquintLeft", 0.2, 0.1),
                         ("jawOpen", 0.2, 0.05), ("browInnerUp", 0.1, 0.1)):
        v = (rng.random(n) < p) * rng.random(n) * top
        w[:, IDX[name]] = v
        if name.endswith("Left"):
            w[:, IDX[name[:-4] + "Right"]] = v
    return w
