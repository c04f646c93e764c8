"""The studio's settings model: one validated, Qt-free dataclass per area, with a schema version.

Each area is a dataclass written as one JSON value under ``studio/<area>``
with a ``schema`` number (:data:`SCHEMA_VERSION`) into a key-value store: the
user's QSettings in the studio (passed in by the window, so existing users'
settings keep working), a :class:`MemoryStore` in tests and headless use.
Reading validates every field: a missing, wrong-typed or out-of-range field
takes its default (logged), so a damaged or older settings file never stops the
app from starting.

:class:`StudioSettings` holds every area; :func:`save_settings_file` and
:func:`load_settings_file` write and read them as one JSON file (File › Export
settings… in the studio, ``avatar-app render --settings FILE``), and
:meth:`StudioSettings.chain` gives the post-processing chain's settings.

Keys kept flat for compatibility with the first window: ``overlay`` (bool),
``record_folder``, ``last_file`` and ``camera`` (int index).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES, Blendshape
from avatar_app.core.errors import AvatarError, InputError
from avatar_app.core.paths import file_in_the_way
from avatar_app.fusion.chain import ChainSettings
from avatar_app.fusion.expressions import EXPRESSION_PRESETS, parse_mix
from avatar_app.fusion.mouth import FusionSettings
from avatar_app.fusion.tuning import DEFAULT_SMOOTHING, REGIONS, TuningSettings
from avatar_app.pipeline.stages import FACE_PATHS

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


#: Face trackers of the Engines panel's Tracking row (``render --tracker``; tracking.select).
TRACKER_KINDS = ("auto", "mediapipe", "onnx")


def default_tracker() -> dict:
    """The Tracking row's default: ``{"kind": "auto", "backend": "auto", "precision": None}``."""
    return {"kind": "auto", "backend": "auto", "precision": None}


@dataclass
class EngineChoice:
    """Engines panel.

    Attributes:
        choices: the user's ``{"backend", "precision"}`` per engine (None = Auto); read through
            :func:`validate_engine_choices` (unknown engines dropped, bad values at Auto, each named).
        tracker: the Tracking row: ``kind`` (a name of :data:`TRACKER_KINDS`) and, for the ONNX
            tracker, its engine-layer ``backend`` ("auto" or a backend name) and ``precision``
            (None = the backend's default, "fp32", "fp16", "int8").
        face: the face path (the face row's choice, ``render --face``): ``"default"`` (until the user
            chooses: :data:`~avatar_app.pipeline.stages.FACE_ENGINE_BY_DEFAULT` decides), ``"solver"``
            (the geometric solver) or ``"engine"`` (the learned face engine, the solver when it
            cannot load).
    """

    choices: dict[str, dict[str, str | None]] = field(default_factory=dict)
    tracker: dict = field(default_factory=default_tracker)
    face: str = "default"


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


def _note(report: list | None, key: str, value, why: str, used) -> None:
    """Log a rejected value and add ``key: value why; using used`` to ``report`` (when given; ``used``
    None: the value is ignored, nothing stands in for it)."""
    line = f"{key}: {value!r} {why}" + ("" if used is None else f"; using {used!r}")
    log.warning("settings: %s", line)
    if report is not None:
        report.append(line)


#: How a rejected value's expected type is named in the report.
_KIND_NAMES = {int: "an integer", float: "a number", str: "a text", bool: "true or false", list: "a list",
               dict: "an object"}
#: Modifier names of a key sequence (QKeySequence.toString(), portable text).
_MODIFIERS = ("Ctrl", "Alt", "Shift", "Meta")
#: Key names of QKeySequence's portable text besides single characters and F1-F35 (Qt's
#: qkeysequence.cpp keyname table, the keys a hotkey would use).
_KEY_NAMES = frozenset((
    "Space", "Esc", "Escape", "Tab", "Backtab", "Backspace", "Return", "Enter", "Ins", "Insert", "Del",
    "Delete", "Pause", "Print", "SysReq", "Home", "End", "Left", "Up", "Right", "Down", "PgUp", "PgDown",
    "CapsLock", "NumLock", "ScrollLock", "Menu", "Help", "Back", "Forward", "Stop", "Refresh",
    "Volume Down", "Volume Mute", "Volume Up", "Media Play", "Media Stop", "Media Previous", "Media Next",
    "Media Pause", "Toggle Media Play/Pause"))


def _key_name_ok(key: str) -> bool:
    """One key of a chord: a single character, F1-F35 or a name of :data:`_KEY_NAMES`."""
    if len(key) == 1:
        return True
    if key[:1] == "F" and key[1:].isdigit():
        return 1 <= int(key[1:]) <= 35
    return key in _KEY_NAMES


def key_sequence_ok(text: str) -> bool:
    """Whether ``text`` is one key chord in QKeySequence's portable text ("" = no hotkey).

    A chord is zero or more of Ctrl, Alt, Shift, Meta and exactly one other key, joined by
    "+" (e.g. "Ctrl+Alt+F5"; "Ctrl++" is Ctrl and the plus key); the key a single character,
    F1-F35 or one of Qt's key names (:data:`_KEY_NAMES`). Checked without Qt, so render and
    the studio reject the same files.
    """
    if text == "":
        return True
    parts = text[:-2].split("+") + ["+"] if text.endswith("++") else text.split("+")
    *mods, key = parts
    return (bool(key) and key not in _MODIFIERS and _key_name_ok(key) and all(m in _MODIFIERS for m in mods)
            and len(set(mods)) == len(mods))


def _check(cls, data: dict, report: list | None = None, area: str = ""):
    """Build ``cls`` from ``data`` field by field, defaults for anything invalid (each noted in ``report``)."""
    default = cls()
    kwargs = {}
    prefix = area or cls.__name__
    names = {f.name for f in fields(cls)}
    for key in data:
        if key not in names and key != "schema":
            _note(report, f"{prefix}.{key}", data[key], "is not a setting (ignored)", None)
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
            _note(report, f"{prefix}.{f.name}", value, f"is not {_KIND_NAMES.get(type(ref), type(ref).__name__)}",
                  ref)
    return cls(**kwargs)


#: Allowed values per (area class, field): a tuple of choices or a (low, high) range given as a list.
_ALLOWED = {
    (SourceSettings, "kind"): ("camera", "file"),
    (AvatarSettings, "lighting"): LIGHTING_CHOICES,
    (AvatarSettings, "msaa"): (0, 2, 4, 8),
    (OutputSettings, "fps_cap"): [0, 240],
    (OutputSettings, "cpu_mode"): tuple(CPU_MODES),
    (OutputSettings, "vmc_port"): [1, 65535],
    (OutputSettings, "vmc_names"): ("unity", "arkit"),
    (EngineChoice, "face"): FACE_PATHS,
}


def validate(obj, report: list | None = None, area: str = ""):
    """Range checks of an area; invalid fields are reset to defaults (logged, noted in ``report``). Returns obj."""
    d, prefix = type(obj)(), area or type(obj).__name__
    for (cls, name), allowed in _ALLOWED.items():
        if not isinstance(obj, cls):
            continue
        value = getattr(obj, name)
        if isinstance(allowed, list) and not allowed[0] <= value <= allowed[1]:
            _note(report, f"{prefix}.{name}", value, f"is out of range {allowed[0]}..{allowed[1]} (rejected)",
                  getattr(d, name))
            setattr(obj, name, getattr(d, name))
        elif isinstance(allowed, tuple) and value not in allowed:
            _note(report, f"{prefix}.{name}", value, f"is not one of {', '.join(map(str, allowed))}",
                  getattr(d, name))
            setattr(obj, name, getattr(d, name))
    if isinstance(obj, AvatarSettings):
        bg = obj.background
        if not (bg == "transparent" or (isinstance(bg, list) and len(bg) == 3
                                        and all(isinstance(c, int) and 0 <= c <= 255 for c in bg))):
            _note(report, f"{prefix}.background", bg, "is neither \"transparent\" nor [R, G, B] bytes",
                  d.background)
            obj.background = d.background
    if isinstance(obj, ExpressionSettings):
        _validate_expressions(obj, d, report, prefix)
    if isinstance(obj, EngineChoice):
        obj.choices = validate_engine_choices(obj.choices, report, prefix)
        obj.tracker = validate_tracker(obj.tracker, report, prefix)
    if isinstance(obj, OutputSettings):
        from avatar_app.record.formats import KNOWN_FORMATS

        keys = [f.key for f in KNOWN_FORMATS]
        if obj.format not in keys:
            _note(report, f"{prefix}.format", obj.format, f"is not one of {', '.join(keys)}", d.format)
            obj.format = d.format
    return obj


def _validate_expressions(obj: ExpressionSettings, d: ExpressionSettings, report: list | None, prefix: str) -> None:
    """Hotkeys (known expressions, one key chord each), modes and the custom mix of the Expressions area."""
    for k, m in obj.modes.items():
        if m not in ("toggle", "hold"):
            _note(report, f"{prefix}.modes.{k}", m, "is not toggle or hold", "toggle")
    for k, v in obj.hotkeys.items():
        if k not in EXPRESSION_NAMES:
            _note(report, f"{prefix}.hotkeys.{k}", v, "is not an expression (ignored)", None)
        elif not isinstance(v, str) or not key_sequence_ok(v):
            _note(report, f"{prefix}.hotkeys.{k}", v, "is not one key with Ctrl/Alt/Shift/Meta", d.hotkeys[k])
            obj.hotkeys[k] = d.hotkeys[k]
    try:
        parse_mix(obj.custom)
    except AvatarError as exc:
        _note(report, f"{prefix}.custom", obj.custom, f"is not a mix ({exc})", d.custom)
        obj.custom = d.custom
    obj.hotkeys = {k: str(obj.hotkeys.get(k, d.hotkeys[k])) for k in EXPRESSION_NAMES}
    obj.modes = {k: obj.modes.get(k) if obj.modes.get(k) in ("toggle", "hold") else "toggle"
                 for k in EXPRESSION_NAMES}


def _choice_names(values) -> str:
    return ", ".join("null" if v is None else str(v) for v in values)


def validate_engine_choices(choices: dict, report: list | None, prefix: str) -> dict:
    """The Engines panel's per-engine choices with every bad entry or value (named in ``report``) at Auto.

    Args:
        choices: engine name (a key of :data:`avatar_app.pipeline.engines.ENGINES`) ->
            ``{"backend": a key of BACKEND_LABELS or null, "precision": one of PRECISIONS or null}``.
        report: gets one line per rejected key (``key: value why; using X``), when given.
        prefix: the area's name in those lines (``engines``).

    Returns:
        A new dict: known engines only, each ``{"backend": str, "precision": str | None}`` (a null
        backend is "auto"); an unknown engine is dropped, a value that is not an object is Auto,
        a bad backend is "auto", a bad precision null (the backend's default).
    """
    from avatar_app.pipeline.engines import BACKEND_LABELS, ENGINES, PRECISIONS

    allowed = {"backend": (*BACKEND_LABELS, None), "precision": (None, *PRECISIONS)}
    out: dict[str, dict[str, str | None]] = {}
    for name, choice in choices.items():
        key = f"{prefix}.choices.{name}"
        if name not in ENGINES:
            _note(report, key, choice, f"is not an engine (one of {', '.join(ENGINES)}) (ignored)", None)
            continue
        chosen: dict[str, str | None] = {"backend": "auto", "precision": None}
        if not isinstance(choice, dict):
            _note(report, key, choice, 'is not an object like {"backend": "auto", "precision": null}', chosen)
            out[name] = chosen
            continue
        for k, value in choice.items():
            if k not in allowed:
                _note(report, f"{key}.{k}", value, "is not a setting (ignored)", None)
            elif isinstance(value, bool) or not isinstance(value, (str, type(None))) or value not in allowed[k]:
                _note(report, f"{key}.{k}", value, f"is not one of {_choice_names(allowed[k])}"
                      + ("; using the backend's default" if chosen[k] is None else ""), chosen[k])
            else:
                chosen[k] = value if value is not None or k == "precision" else "auto"
        out[name] = chosen
    return out


def validate_tracker(t: dict, report: list | None, prefix: str) -> dict:
    """The Tracking row's choice with every bad value (named in ``report``) at its default."""
    from avatar_app.pipeline.engines import BACKEND_LABELS, PRECISIONS

    out = default_tracker()
    allowed = {"kind": TRACKER_KINDS, "backend": tuple(BACKEND_LABELS), "precision": (None, *PRECISIONS)}
    for key, value in t.items():
        if key not in allowed:
            _note(report, f"{prefix}.tracker.{key}", value, "is not a setting (ignored)", None)
        elif value not in allowed[key] or isinstance(value, bool):
            names = ", ".join("null" if v is None else v for v in allowed[key])
            _note(report, f"{prefix}.tracker.{key}", value, f"is not one of {names}"
                  + ("; using the backend's default" if out[key] is None else ""), out[key])
        else:
            out[key] = value
    return out


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


#: The tracking settings' per-region or per-shape tables and their on/off keys (``tuning`` in a settings file).
_TUNING_GROUPS = ("smoothing", "sensitivity", "remap")
_TUNING_FLAGS = ("link_eyes", "mirror", "auto_blink", "idle_motion")


def tuning_from_json(data: dict, report: list | None = None) -> TuningSettings:
    """Inverse of :func:`tuning_to_json`; invalid entries are skipped (logged, each noted in ``report``).

    Ranges: smoothing 0..1 per region of fusion.tuning.REGIONS, sensitivity 0..5 per ARKit shape,
    remap [low, high] with 0 <= low < high - 0.009 <= 1.

    Raises:
        InputError: never for bad values (they are skipped); only if ``data`` is not a dict.
    """
    if not isinstance(data, dict):
        raise InputError("tracking settings must be a JSON object")
    s = TuningSettings()

    def number(v, lo, hi) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi

    for group, ok, why in (("smoothing", lambda k, v: k in REGIONS and number(v, 0, 1),
                            "is not a region's smoothing (a region of " + ", ".join(REGIONS) + ", 0..1)"),
                           ("sensitivity", lambda k, v: k in BLENDSHAPE_NAMES and number(v, 0, 5),
                            "is not a shape's sensitivity (an ARKit name, 0..5)"),
                           ("remap", lambda k, v: k in BLENDSHAPE_NAMES and isinstance(v, list) and len(v) == 2
                            and all(number(x, 0, 1) for x in v) and v[0] < v[1] - 0.009,
                            "is not a shape's remap (an ARKit name, [low, high] in 0..1)")):
        entries = data.get(group, {})
        if not isinstance(entries, dict):
            _note(report, f"tuning.{group}", entries, "is not an object", None)
            continue
        for name, v in entries.items():
            if not ok(name, v):
                known = name in (REGIONS if group == "smoothing" else BLENDSHAPE_NAMES)
                default = {"smoothing": DEFAULT_SMOOTHING.get(name), "sensitivity": 1.0, "remap": [0.0, 1.0]}[group]
                _note(report, f"tuning.{group}.{name}", v, why + (" (rejected)" if known else " (ignored)"),
                      default if known else None)
            elif group == "smoothing":
                s.smoothing[name] = float(v)
            elif group == "sensitivity":
                s.sensitivity[Blendshape[name]] = float(v)
            else:
                s.remap_min[Blendshape[name]], s.remap_max[Blendshape[name]] = float(v[0]), float(v[1])
    for key in _TUNING_FLAGS:
        if isinstance(data.get(key), bool):
            setattr(s, key, data[key])
        elif key in data:
            _note(report, f"tuning.{key}", data[key], "is not true or false", getattr(s, key))
    for key in data:
        if key not in _TUNING_GROUPS + _TUNING_FLAGS + ("schema",):
            _note(report, f"tuning.{key}", data[key], "is not a setting (ignored)", None)
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


# ----------------------------------------------------------------------------- stores
class MemoryStore:
    """A key-value store with QSettings' ``value``/``setValue``/``sync`` (tests, headless sessions).

    Args:
        values: initial key -> value.
    """

    def __init__(self, values: dict | None = None):
        self.values: dict = dict(values or {})

    def value(self, key: str, default=None, type=None):  # noqa: A002 (QSettings' keyword)
        """The value of ``key`` (``default`` when absent), converted by ``type`` when given."""
        v = self.values.get(key, default)
        if type is not None and v is not None and not isinstance(v, type):
            try:
                v = type(v)
            except (TypeError, ValueError):
                return default
        return v

    def setValue(self, key: str, value) -> None:  # noqa: N802 (QSettings' name)
        """Set ``key``."""
        self.values[key] = value

    def sync(self) -> None:
        """Nothing to write (QSettings' API)."""


# ----------------------------------------------------------------------------- all areas
@dataclass
class StudioSettings:
    """Every area of the studio's settings.

    Attributes:
        source, engines, expressions, avatar, output: the panels' areas.
        tuning: the Tracking panel's settings.
        fusion: mouth fusion (audio mix, mouth covered).
    """

    source: SourceSettings = field(default_factory=SourceSettings)
    engines: EngineChoice = field(default_factory=EngineChoice)
    expressions: ExpressionSettings = field(default_factory=ExpressionSettings)
    avatar: AvatarSettings = field(default_factory=AvatarSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    tuning: TuningSettings = field(default_factory=TuningSettings)
    fusion: FusionSettings = field(default_factory=lambda: FusionSettings(smoothing=False))

    @classmethod
    def load(cls, store) -> StudioSettings:
        """Every area from a store (defaults for what is absent or damaged)."""
        s = cls(*(load_area(store, c) for c in (SourceSettings, EngineChoice, ExpressionSettings, AvatarSettings,
                                               OutputSettings)))
        s.tuning = load_tuning(store)
        s.fusion = _fusion_from_json(_json_value(store, "studio/FusionSettings"))
        return s

    def save(self, store) -> None:
        """Write every area into a store."""
        for area in (self.source, self.engines, self.expressions, self.avatar, self.output):
            save_area(store, area)
        save_tuning(store, self.tuning)
        store.setValue("studio/FusionSettings", json.dumps(_fusion_to_json(self.fusion)))

    def custom_mix(self) -> dict[str, float]:
        """The custom expression as blendshape -> weight ({} when its text does not parse)."""
        try:
            return parse_mix(self.expressions.custom)
        except AvatarError as exc:
            log.warning("settings: the custom expression is ignored: %s", exc)
            return {}

    def chain(self) -> ChainSettings:
        """The post-processing chain's settings (fusion, tuning, the custom expression)."""
        return ChainSettings(fusion=FusionSettings(**{**asdict(self.fusion), "smoothing": False}),
                             tuning=self.tuning.copy(), expressions={"custom": self.custom_mix()})


#: What a settings file says it is (checked on reading).
SETTINGS_FILE_KIND = "avatar_app studio settings"


def _fusion_to_json(f: FusionSettings) -> dict:
    return {"schema": SCHEMA_VERSION, "audio_mix": f.audio_mix, "mouth_covered": f.mouth_covered}


def _fusion_from_json(data, report: list | None = None) -> FusionSettings:
    f = FusionSettings(smoothing=False)
    if isinstance(data, dict):
        mix = data.get("audio_mix")
        if isinstance(mix, (int, float)) and not isinstance(mix, bool) and 0 <= mix <= 1:
            f.audio_mix = float(mix)
        elif "audio_mix" in data:
            _note(report, "fusion.audio_mix", mix, "is not a number in 0..1 (rejected)", f.audio_mix)
        if isinstance(data.get("mouth_covered"), bool):
            f.mouth_covered = data["mouth_covered"]
        elif "mouth_covered" in data:
            _note(report, "fusion.mouth_covered", data["mouth_covered"], "is not true or false", f.mouth_covered)
    return f


def _json_value(store, key: str):
    raw = store.value(key, "", type=str)
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError:
        log.warning("settings: %s is not valid JSON; using defaults", key)
        return None


def settings_to_json(s: StudioSettings) -> dict:
    """Every area as one JSON object (the settings file's content)."""
    return {"kind": SETTINGS_FILE_KIND, "schema": SCHEMA_VERSION,
            "source": asdict(s.source), "engines": asdict(s.engines), "expressions": asdict(s.expressions),
            "avatar": asdict(s.avatar), "output": asdict(s.output), "tuning": tuning_to_json(s.tuning),
            "fusion": _fusion_to_json(s.fusion)}


def settings_from_json(data: dict, report: list | None = None) -> StudioSettings:
    """Inverse of :func:`settings_to_json`; invalid fields take their defaults (logged).

    Args:
        data: the settings file's JSON object.
        report: when given, one line per rejected key is appended (``key: value why; using X``),
            for ``render --settings`` and File › Import settings… to show.

    Raises:
        InputError: ``data`` is not a settings object.
    """
    if not isinstance(data, dict) or data.get("kind") != SETTINGS_FILE_KIND:
        raise InputError("not an avatar_app studio settings file (export one with File › Export settings…)")
    if data.get("schema") != SCHEMA_VERSION:
        _note(report, "schema", data.get("schema"),
              f"is not this version's schema {SCHEMA_VERSION} (reading what still fits)", SCHEMA_VERSION)
    known = ("kind", "schema", "source", "engines", "expressions", "avatar", "output", "tuning", "fusion")
    for key in data:
        if key not in known:
            _note(report, key, data[key], "is not a settings area (ignored)", None)
    out = StudioSettings()
    for name, cls in (("source", SourceSettings), ("engines", EngineChoice), ("expressions", ExpressionSettings),
                      ("avatar", AvatarSettings), ("output", OutputSettings)):
        area = data.get(name)
        if isinstance(area, dict):
            setattr(out, name, validate(_check(cls, area, report, name), report, name))
        elif name in data:
            _note(report, name, area, "is not an object", None)
    if isinstance(data.get("tuning"), dict):
        out.tuning = tuning_from_json(data["tuning"], report)
    elif "tuning" in data:
        _note(report, "tuning", data["tuning"], "is not an object", None)
    out.fusion = _fusion_from_json(data.get("fusion"), report)
    return out


def save_settings_file(path: Path, s: StudioSettings) -> Path:
    """Write every area to a JSON settings file (what ``avatar-app render --settings`` reads).

    Raises:
        InputError: the file cannot be written (names it and why).
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"Cannot write the settings file {path}: it is a folder", path)
    blocker = file_in_the_way(path.parent)
    if blocker is not None:  # (mkdir says only "File exists")
        raise InputError(f"Cannot write the settings file {path}: {blocker} is a file, not a folder", path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings_to_json(s), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"Cannot write the settings file {path}: {exc.strerror or exc}", path) from exc
    return path


def load_settings_file(path: Path, report: list | None = None) -> StudioSettings:
    """Read a settings file written by :func:`save_settings_file`.

    Values that are invalid or out of range take their defaults; each is appended to ``report``
    (when given) as one line naming the key and the value.

    Raises:
        InputError: the file is missing, not JSON or not a studio settings file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"Settings file not found: {path}", path) from None
    except IsADirectoryError:
        raise InputError(f"Cannot read the settings file {path}: it is a folder", path) from None
    except OSError as exc:
        raise InputError(f"Cannot read the settings file {path}: {exc.strerror or exc}", path) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"Cannot read the settings file {path}: {exc}", path) from exc
    try:
        return settings_from_json(data, report)
    except InputError as exc:
        raise InputError(f"{path}: {exc}", path) from None
