"""Blendshape name mapping: which morph targets of a user avatar each ARKit weight drives.

Matching is case-insensitive and tolerant of the spellings exporters use
(documented with its reasoning in docs/avatars.md):

1. **ARKit names** (Apple, ``ARFaceAnchor.BlendShapeLocation``), also with
   common prefixes (``blendShape1.``, ``A01_``, ``ARKit_``, ...) and ``_L``/``_R``
   or ``.L``/``.R`` instead of ``Left``/``Right``. A shape ARKit defines on both
   sides at once (browInnerUp, cheekPuff, ...) but a rig splits into ``_L``/``_R``
   halves drives both halves. "Perfect Sync" VRMs name their expressions (VRM 0.x
   blend shape groups, VRM 1.0 custom expressions) after the 52 ARKit shapes;
   those expressions are used first, since they may bind several meshes at once.
2. **VRM presets** (aa, ih, ou, ee, oh, blink, blinkLeft/Right, happy, angry,
   sad, relaxed, surprised, lookUp/Down/Left/Right; VRM 0.x names such as ``a``,
   ``joy``, ``blink_l`` are read as their VRM 1.0 equivalents) are driven from
   ARKit weights through :data:`PRESET_FROM_ARKIT`, only by ARKit shapes the
   avatar lacks, so a rig with both never moves twice.

Everything that stays unmapped is described by :meth:`MappingResult.warning`,
one message for the user.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES

#: VRM 1.0 expression presets (VRM 1.0 spec, "expressions.preset").
VRM_PRESETS: tuple[str, ...] = (
    "happy", "angry", "sad", "relaxed", "surprised", "aa", "ih", "ou", "ee", "oh",
    "blink", "blinkLeft", "blinkRight", "lookUp", "lookDown", "lookLeft", "lookRight", "neutral",
)

#: Other spellings of the presets, lower case: VRM 0.x ``presetName`` values
#: (VRM 0.x spec, "blendShapeGroup.presetName"), VRoid Studio morph target names
#: (``Fcl_*``), and VRChat viseme/blink names (``vrc.*``).
PRESET_ALIASES: dict[str, str] = {
    # VRM 0.x
    "a": "aa", "i": "ih", "u": "ou", "e": "ee", "o": "oh", "joy": "happy", "sorrow": "sad",
    "fun": "relaxed", "blink_l": "blinkLeft", "blink_r": "blinkRight",
    # VRoid Studio
    "fcl_mth_a": "aa", "fcl_mth_i": "ih", "fcl_mth_u": "ou", "fcl_mth_e": "ee", "fcl_mth_o": "oh",
    "fcl_eye_close": "blink", "fcl_eye_close_l": "blinkLeft", "fcl_eye_close_r": "blinkRight",
    "fcl_all_joy": "happy", "fcl_all_angry": "angry", "fcl_all_sorrow": "sad", "fcl_all_fun": "relaxed",
    "fcl_all_surprised": "surprised",
    # VRChat
    "vrc.v_aa": "aa", "vrc.v_ih": "ih", "vrc.v_ou": "ou", "vrc.v_e": "ee", "vrc.v_oh": "oh",
    "vrc.blink": "blink", "vrc.blink_left": "blinkLeft", "vrc.blink_right": "blinkRight",
}

#: ARKit weights -> VRM preset weight: ``preset = clip(sum(factor * arkit), 0, 1)``.
#: Reasoning per row in docs/avatars.md. Left/Right are the subject's own sides,
#: and VRM's lookLeft turns the eyes toward the avatar's own left (+X).
PRESET_FROM_ARKIT: dict[str, dict[str, float]] = {
    "aa": {"jawOpen": 1.0, "mouthFunnel": -0.5, "mouthPucker": -0.5},
    "ih": {"mouthLowerDownLeft": 0.5, "mouthLowerDownRight": 0.5},
    "ou": {"mouthPucker": 1.0},
    "ee": {"mouthStretchLeft": 0.5, "mouthStretchRight": 0.5},
    "oh": {"mouthFunnel": 1.0},
    "blinkLeft": {"eyeBlinkLeft": 1.0},
    "blinkRight": {"eyeBlinkRight": 1.0},
    "blink": {"eyeBlinkLeft": 0.5, "eyeBlinkRight": 0.5},
    "happy": {"mouthSmileLeft": 0.5, "mouthSmileRight": 0.5},
    "angry": {"browDownLeft": 0.5, "browDownRight": 0.5},
    "sad": {"mouthFrownLeft": 0.5, "mouthFrownRight": 0.5},
    "relaxed": {"cheekSquintLeft": 0.5, "cheekSquintRight": 0.5},
    "surprised": {"eyeWideLeft": 0.25, "eyeWideRight": 0.25, "browOuterUpLeft": 0.25, "browOuterUpRight": 0.25},
    "lookUp": {"eyeLookUpLeft": 0.5, "eyeLookUpRight": 0.5},
    "lookDown": {"eyeLookDownLeft": 0.5, "eyeLookDownRight": 0.5},
    "lookLeft": {"eyeLookOutLeft": 0.5, "eyeLookInRight": 0.5},
    "lookRight": {"eyeLookInLeft": 0.5, "eyeLookOutRight": 0.5},
}

_ARKIT_BY_KEY = {n.lower(): n for n in BLENDSHAPE_NAMES}
_UNSIDED = {n for n in BLENDSHAPE_NAMES if not n.endswith(("Left", "Right"))}
# Prefixes exporters put before the shape name: anything up to the last '.', ':' or '|'
# (Maya "blendShape1.", FBX "Face|"), "A01_".."A52_" (Apple's order numbers), "ARKit_",
# "BS_", "bs_", "blendshape_".
_PREFIX_RE = re.compile(r"^(?:.*[.:|])?(?:a\d\d_|arkit_?|bs_|blendshapes?_)?", re.IGNORECASE)
_SIDE_RE = re.compile(r"^(.*?)[_.\-\s]?(l|r|left|right)$", re.IGNORECASE)


def _compact(s: str) -> str:
    return re.sub(r"[\s_\-]", "", s).lower()


def match_arkit(name: str | None) -> list[tuple[str, float]]:
    """ARKit shapes a morph target or expression name stands for.

    Args:
        name: the name as stored in the file, e.g. "blendShape1.eyeBlink_L",
            "A25_Mouth_Smile_Left", "BrowInnerUp_R", "jawOpen".

    Returns:
        [(ARKit name, factor)]: usually one entry with factor 1.0; empty when the
        name is not an ARKit shape. A half of a two-sided ARKit shape (e.g.
        "browInnerUp_L") returns that shape with factor 1.0 (each half follows it).
    """
    if not name:
        return []
    text = re.sub(r"\.([lr])$", r"_\1", name.strip(), flags=re.IGNORECASE)  # Blender's ".L" / ".R"
    # Try the whole name, then what follows each separator ("Face_jawOpen" -> "jawOpen").
    starts = [0] + [i + 1 for i, c in enumerate(text) if c in "_.:| " and i + 1 < len(text)]
    for s in starts:
        found = _match_one(_PREFIX_RE.sub("", text[s:]))
        if found:
            return found
    return []


def _match_one(base: str) -> list[tuple[str, float]]:
    key = _compact(base)
    if key in _ARKIT_BY_KEY:
        return [(_ARKIT_BY_KEY[key], 1.0)]
    m = _SIDE_RE.match(base)
    if m and m.group(1):
        stem, side = _compact(m.group(1)), m.group(2).lower()
        side = "left" if side.startswith("l") else "right"
        if stem + side in _ARKIT_BY_KEY:
            return [(_ARKIT_BY_KEY[stem + side], 1.0)]
        if stem in _ARKIT_BY_KEY and _ARKIT_BY_KEY[stem] in _UNSIDED:
            return [(_ARKIT_BY_KEY[stem], 1.0)]
    return []


def match_preset(name: str | None) -> str | None:
    """VRM 1.0 preset a name stands for ("A", "Joy", "Fcl_EYE_Close_L", "vrc.v_aa", "aa").

    Returns:
        one of :data:`VRM_PRESETS`, or None.
    """
    if not name:
        return None
    low = name.strip().lower()
    for p in VRM_PRESETS:
        if low == p.lower():
            return p
    return PRESET_ALIASES.get(low)


@dataclass(frozen=True)
class TargetInfo:
    """A morph target of the avatar as the mapping sees it.

    Attributes:
        key: the target's name in :class:`~avatar_app.avatar.mesh.AvatarMesh`
            (unique; equal to ``name`` for named targets).
        name: the name in the file (None when the file gives none).
        label: how messages refer to it, e.g. "mesh 'Face' target 3".
    """

    key: str
    name: str | None
    label: str


@dataclass(frozen=True)
class ExpressionInfo:
    """A VRM expression (VRM 1.0 expression / VRM 0.x blend shape group).

    Attributes:
        name: its name in the file ("aa", "Joy", "EyeBlinkLeft", ...).
        preset: the VRM 1.0 preset it is (None for custom ones).
        binds: target key -> weight in [0, 1] at full expression.
    """

    name: str
    preset: str | None
    binds: dict[str, float]


@dataclass
class MappingResult:
    """Outcome of :func:`build_mapping`.

    Attributes:
        blendshape_map: ARKit name -> {target key: factor} (for
            :attr:`AvatarMesh.blendshape_map`).
        direct: ARKit name -> what drives it ("morph target 'x'" / "expression 'y'").
        presets: VRM preset -> the ARKit shapes driving it.
        missing: ARKit names that drive nothing, in Apple's order.
        unmapped_targets: labels of named morph targets no ARKit weight reaches.
        unnamed_targets: labels of morph targets without a name (never bound).
        unused_expressions: names of expressions with bindings that nothing drives.
        empty_expressions: names of expressions that bind no morph target.
    """

    blendshape_map: dict[str, dict[str, float]] = field(default_factory=dict)
    direct: dict[str, list[str]] = field(default_factory=dict)
    presets: dict[str, list[str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unmapped_targets: list[str] = field(default_factory=list)
    unnamed_targets: list[str] = field(default_factory=list)
    unused_expressions: list[str] = field(default_factory=list)
    empty_expressions: list[str] = field(default_factory=list)

    @property
    def driven_targets(self) -> set[str]:
        """Keys of every target some ARKit weight reaches."""
        return {k for row in self.blendshape_map.values() for k in row}

    def warning(self, avatar: str) -> str | None:
        """One message listing everything unmapped, or None when all is mapped.

        Args:
            avatar: name of the avatar for the message (e.g. its file name).
        """
        parts = []
        if self.unnamed_targets:
            parts.append(f"{len(self.unnamed_targets)} morph target(s) have no name and are not driven "
                         f"({_short(self.unnamed_targets)})")
        if self.unmapped_targets:
            parts.append(f"{len(self.unmapped_targets)} morph target(s) match no ARKit shape or VRM preset and "
                         f"are not driven ({_short(self.unmapped_targets)})")
        if self.unused_expressions:
            parts.append(f"{len(self.unused_expressions)} VRM expression(s) are not driven "
                         f"({_short(self.unused_expressions)})")
        if self.empty_expressions:
            parts.append(f"{len(self.empty_expressions)} VRM expression(s) bind no morph target "
                         f"({_short(self.empty_expressions)})")
        n_missing = len(self.missing)
        if n_missing == len(BLENDSHAPE_NAMES):
            parts.append("none of the 52 ARKit shapes moves anything: the face will not animate")
        elif n_missing:
            parts.append(f"{len(BLENDSHAPE_NAMES) - n_missing} of 52 ARKit shapes mapped; no morph target for "
                         f"{', '.join(self.missing)}")
        if not parts:
            return None
        return f"avatar {avatar}: " + "; ".join(parts)


def _short(items: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _add(dst: dict[str, dict[str, float]], arkit: str, targets: dict[str, float], factor: float) -> None:
    row = dst.setdefault(arkit, {})
    for key, w in targets.items():
        row[key] = row.get(key, 0.0) + factor * w


def _preset_binds(targets: list[TargetInfo], expressions: list[ExpressionInfo],
                  gaze_by_bones: bool) -> dict[str, dict[str, float]]:
    """Morph-target weights of each VRM preset: its bound expression, else targets named like it."""
    preset_binds: dict[str, dict[str, float]] = {}
    bound = set()
    for ex in expressions:
        if ex.preset is not None and ex.binds and ex.preset not in preset_binds:
            preset_binds[ex.preset] = dict(ex.binds)
            bound.add(ex.preset)
    for t in targets:
        p = match_preset(t.name)
        if p is not None and p not in bound:
            preset_binds.setdefault(p, {})[t.key] = 1.0
    if "blinkLeft" in preset_binds or "blinkRight" in preset_binds:
        preset_binds.pop("blink", None)  # one-eyed blinks cover it; blink would close both twice
    if gaze_by_bones:
        for p in ("lookUp", "lookDown", "lookLeft", "lookRight"):
            preset_binds.pop(p, None)
    return preset_binds


def build_mapping(
    targets: Iterable[TargetInfo],
    expressions: Iterable[ExpressionInfo] = (),
    *,
    gaze_by_bones: bool = False,
) -> MappingResult:
    """Map the 52 ARKit weights onto an avatar's morph targets and VRM expressions.

    Order of preference: custom expressions named after ARKit shapes (Perfect
    Sync), then morph targets named after ARKit shapes, then VRM presets (bound
    expressions, or morph targets named like a preset) driven by
    :data:`PRESET_FROM_ARKIT` from the ARKit shapes still missing.

    Args:
        targets: every morph target of the avatar.
        expressions: the VRM expressions (empty for plain glTF).
        gaze_by_bones: the renderer turns eye bones with the gaze, so the look*
            presets are left undriven (they would turn the eyes twice).

    Returns:
        the mapping and what stayed unmapped.
    """
    targets = list(targets)
    expressions = list(expressions)
    res = MappingResult()
    bmap = res.blendshape_map

    # 1. Perfect Sync: expressions named after ARKit shapes.
    for ex in expressions:
        if ex.preset is None and ex.binds:
            for arkit, f in match_arkit(ex.name):
                _add(bmap, arkit, ex.binds, f)
                res.direct.setdefault(arkit, []).append(f"expression '{ex.name}'")
    by_expression = set(bmap)
    # 2. Morph targets named after ARKit shapes (for shapes no expression covers).
    for t in targets:
        for arkit, f in match_arkit(t.name):
            if arkit not in by_expression:
                _add(bmap, arkit, {t.key: 1.0}, f)
                res.direct.setdefault(arkit, []).append(f"morph target '{t.name}'")
    direct = set(bmap)

    # 3. VRM presets from the ARKit shapes still missing.
    used_presets = set()
    for preset, binds in _preset_binds(targets, expressions, gaze_by_bones).items():
        terms = {a: f for a, f in PRESET_FROM_ARKIT.get(preset, {}).items() if a not in direct}
        if not any(f > 0 for f in terms.values()):
            continue
        for arkit, f in terms.items():
            _add(bmap, arkit, binds, f)
        res.presets[preset] = [a for a, f in terms.items() if f > 0]
        used_presets.add(preset)

    driven_arkit = {a for a, row in bmap.items() if any(v > 0 for v in row.values())}
    res.missing = [n for n in BLENDSHAPE_NAMES if n not in driven_arkit]
    driven = res.driven_targets
    res.unnamed_targets = [t.label for t in targets if not t.name]
    res.unmapped_targets = [t.name for t in targets if t.name and t.key not in driven]
    for ex in expressions:
        if not ex.binds:
            res.empty_expressions.append(ex.name)
            continue
        used = ex.preset in used_presets if ex.preset is not None else bool(match_arkit(ex.name))
        if not used and ex.preset != "neutral" and not set(ex.binds) <= driven:
            res.unused_expressions.append(ex.name)
    return res
