"""The studio's persisted settings: one validated model per area, stored in QSettings.

Each area is a dataclass written as one JSON value under ``studio/<area>``
with a ``schema`` number (:data:`SCHEMA_VERSION`). Reading validates every
field: a missing, wrong-typed or out-of-range field takes its default (logged),
so a damaged or older settings file never stops the app from starting.

Keys kept flat for compatibility with the first window: ``overlay`` (bool),
``record_folder``, ``last_file`` and ``camera`` (int index).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import InputError
from avatar_app.fusion.tuning import DEFAULT_SMOOTHING, EXPRESSION_PRESETS, REGIONS, TuningSettings

log = logging.getLogger(__name__)

#: Version of the JSON layout of every area.
SCHEMA_VERSION = 1

#: Lighting presets offered (Renderer.LIGHTING_PRESETS keys).
LIGHTING_CHOICES = ("studio", "soft", "flat")
#: CPU budget modes: name -> (frame-rate cap Hz, MSAA allowed, camera preview on, plots on).
CPU_MODES: dict[str, tuple[float, bool, bool, bool]] = {
    "full": (0.0, True, True, True),
    "balanced": (30.0, True, True, True),
    "low": (20.0, False, False, False),
}
CPU_MODE_LABELS = {"full": "Full quality", "balanced": "Balanced (streaming)",
                   "low": "Low CPU (while gaming)"}
#: Expression names in the panel's order; "custom" is the user's own mix.
EXPRESSION_NAMES = (*EXPRESSION_PRESETS, "custom")
DEFAULT_HOTKEYS = {"happy": "F5", "angry": "F6", "surprised": "F7", "sad": "F8", "custom": "F9"}


@dataclass
class SourceSettings:
    """Sources panel.

    Attributes:
        kind: "camera" or "file" (what opens on start).
        camera_id: stable device id of the last camera (see ui.devices), "" = index.
        microphone: name of the chosen microphone, "" = the system default.
    """

    kind: str = "camera"
    camera_id: str = ""
    microphone: str = ""


@dataclass
class EngineChoice:
    """Engines panel: the user's (backend, precision) per engine; None = Auto."""

    choices: dict[str, dict[str, str | None]] = field(default_factory=dict)


@dataclass
class ExpressionSettings:
    """Expressions panel.

    Attributes:
        hotkeys: expression -> key sequence text (``QKeySequence.toString()``).
        modes: expression -> "toggle" (press on, press off) or "hold" (on while held).
        custom: the custom mix as ``name=weight`` text (ui.tuning.parse_mix).
    """

    hotkeys: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_HOTKEYS))
    modes: dict[str, str] = field(default_factory=lambda: {n: "toggle" for n in EXPRESSION_NAMES})
    custom: str = "jawOpen=0.4, tongueOut=1"


@dataclass
class AvatarSettings:
    """Avatar panel.

    Attributes:
        path: the loaded avatar file, "" = the default head.
        background: [R, G, B] bytes, or "transparent".
        lighting: a name of LIGHTING_CHOICES.
        msaa: 0, 2, 4 or 8 samples.
    """

    path: str = ""
    background: list | str = field(default_factory=lambda: [0, 177, 64])
    lighting: str = "studio"
    msaa: int = 0


@dataclass
class OutputSettings:
    """Output panel.

    Attributes:
        format: a recording format key (record.formats), e.g. "h264-mp4".
        overlay_in_recording: draw the latency overlay into recordings.
        fps_cap: frame-rate cap of processing and display, Hz (0 = none).
        cpu_mode: a key of CPU_MODES.
        vmc_enabled, vmc_host, vmc_port, vmc_names: the VMC protocol output (off by default).
        virtual_camera: send the avatar to a virtual camera (off by default).
    """

    format: str = "h264-mp4"
    overlay_in_recording: bool = False
    fps_cap: float = 0.0
    cpu_mode: str = "full"
    vmc_enabled: bool = False
    vmc_host: str = "127.0.0.1"
    vmc_port: int = 39539
    vmc_names: str = "unity"
    virtual_camera: bool = False


def _check(cls, data: dict):
    """Build ``cls`` from ``data`` field by field, defaults for anything invalid."""
    default = cls()
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, ref = data[f.name], getattr(default, f.name)
        ok = isinstance(value, type(ref)) or (isinstance(ref, float) and isinstance(value, int)) \
            or (isinstance(ref, (list, str)) and isinstance(value, (list, str)) and f.name == "background")
        if isinstance(ref, bool) != isinstance(value, bool):
            ok = False
        if ok:
            kwargs[f.name] = value
        else:
            log.warning("settings: %s.%s has an invalid value %r; using %r", cls.__name__, f.name, value, ref)
    obj = cls(**kwargs)
    return obj


def validate(obj):
    """Range checks of an area; invalid fields are reset to defaults (logged). Returns obj."""
    d = type(obj)()
    if isinstance(obj, SourceSettings) and obj.kind not in ("camera", "file"):
        obj.kind = d.kind
    if isinstance(obj, AvatarSettings):
        bg = obj.background
        if not (bg == "transparent" or (isinstance(bg, list) and len(bg) == 3
                                        and all(isinstance(c, int) and 0 <= c <= 255 for c in bg))):
            log.warning("settings: background %r is invalid", bg)
            obj.background = d.background
        if obj.lighting not in LIGHTING_CHOICES:
            obj.lighting = d.lighting
        if obj.msaa not in (0, 2, 4, 8):
            obj.msaa = d.msaa
    if isinstance(obj, OutputSettings):
        if not 0 <= obj.fps_cap <= 240:
            obj.fps_cap = d.fps_cap
        if obj.cpu_mode not in CPU_MODES:
            obj.cpu_mode = d.cpu_mode
        if not 1 <= obj.vmc_port <= 65535:
            obj.vmc_port = d.vmc_port
        if obj.vmc_names not in ("unity", "arkit"):
            obj.vmc_names = d.vmc_names
    if isinstance(obj, ExpressionSettings):
        obj.hotkeys = {k: str(obj.hotkeys.get(k, d.hotkeys[k])) for k in EXPRESSION_NAMES}
        obj.modes = {k: obj.modes.get(k) if obj.modes.get(k) in ("toggle", "hold") else "toggle"
                     for k in EXPRESSION_NAMES}
    return obj


def load_area(settings, cls):
    """Read one area from a QSettings (defaults when absent or damaged).

    Args:
        settings: a QSettings.
        cls: SourceSettings, EngineChoice, ExpressionSettings, AvatarSettings or OutputSettings.

    Returns:
        An instance of ``cls``.
    """
    raw = settings.value(f"studio/{cls.__name__}", "", type=str)
    if not raw:
        return cls()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        log.warning("settings: %s is not valid JSON (%s); using defaults", cls.__name__, exc)
        return cls()
    if not isinstance(data, dict):
        return cls()
    if data.get("schema") != SCHEMA_VERSION:
        log.info("settings: %s has schema %r (now %d); reading what still fits",
                 cls.__name__, data.get("schema"), SCHEMA_VERSION)
    return validate(_check(cls, data))


def save_area(settings, obj) -> None:
    """Write one area (with the schema number) into a QSettings."""
    data = asdict(obj)
    data["schema"] = SCHEMA_VERSION
    settings.setValue(f"studio/{type(obj).__name__}", json.dumps(data))


# ----------------------------------------------------------------------------- tuning
def tuning_to_json(s: TuningSettings) -> dict:
    """TuningSettings as JSON: only shapes whose gain or remap differ from the defaults."""
    sens = {BLENDSHAPE_NAMES[i]: round(float(v), 4) for i, v in enumerate(s.sensitivity) if v != 1.0}
    remap = {BLENDSHAPE_NAMES[i]: [round(float(s.remap_min[i]), 4), round(float(s.remap_max[i]), 4)]
             for i in range(NUM_BLENDSHAPES) if s.remap_min[i] != 0.0 or s.remap_max[i] != 1.0}
    return {"schema": SCHEMA_VERSION, "smoothing": dict(s.smoothing), "sensitivity": sens, "remap": remap,
            "link_eyes": s.link_eyes, "mirror": s.mirror, "auto_blink": s.auto_blink,
            "idle_motion": s.idle_motion}


def tuning_from_json(data: dict) -> TuningSettings:
    """Inverse of :func:`tuning_to_json`; invalid entries are skipped (logged).

    Raises:
        InputError: never for bad values (they are skipped); only if ``data`` is not a dict.
    """
    if not isinstance(data, dict):
        raise InputError("tracking settings must be a JSON object")
    s = TuningSettings()
    for region, v in dict(data.get("smoothing", {})).items():
        if region in REGIONS and isinstance(v, (int, float)) and 0 <= v <= 1:
            s.smoothing[region] = float(v)
    for name, v in dict(data.get("sensitivity", {})).items():
        if name in BLENDSHAPE_NAMES and isinstance(v, (int, float)) and 0 <= v <= 5:
            s.sensitivity[Blendshape[name]] = float(v)
    for name, v in dict(data.get("remap", {})).items():
        if name in BLENDSHAPE_NAMES and isinstance(v, list) and len(v) == 2 \
                and all(isinstance(x, (int, float)) for x in v) and 0 <= v[0] < v[1] - 0.009 <= 1:
            s.remap_min[Blendshape[name]], s.remap_max[Blendshape[name]] = float(v[0]), float(v[1])
    for key in ("link_eyes", "mirror", "auto_blink", "idle_motion"):
        if isinstance(data.get(key), bool):
            setattr(s, key, data[key])
    for region in DEFAULT_SMOOTHING:
        s.smoothing.setdefault(region, DEFAULT_SMOOTHING[region])
    return s


def load_tuning(settings) -> TuningSettings:
    """Tracking settings from a QSettings (defaults when absent or damaged)."""
    raw = settings.value("studio/TuningSettings", "", type=str)
    if not raw:
        return TuningSettings()
    try:
        return tuning_from_json(json.loads(raw))
    except (json.JSONDecodeError, InputError) as exc:
        log.warning("settings: tracking settings unreadable (%s); using defaults", exc)
        return TuningSettings()


def save_tuning(settings, s: TuningSettings) -> None:
    """Write the tracking settings into a QSettings."""
    settings.setValue("studio/TuningSettings", json.dumps(tuning_to_json(s)))
