"""The stage factory: the one place that decides which engine or solver serves each stage.

``build_stages(choice)`` is used by the studio (live and its offline mode),
``avatar-app render`` and the demo, so they cannot drift apart:

- face: the learned face_recon engine when it is enabled (:data:`FACE_ENGINE_BY_DEFAULT`,
  or ``AVATAR_APP_FACE_ENGINE=1``) and usable, else the geometric solver;
- speech (only with audio): the learned speech2face engine when usable, else the
  loudness solver.

"Usable" means: with ``choice.slots`` given (the studio), the slot the engine
controller has open (none yet: the solver serves, never a second engine);
without (render, demo), the shipped model opened through a new EngineManager.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from avatar_app.core.errors import AvatarError
from avatar_app.fusion.chain import ChainSettings, PostChain

log = logging.getLogger(__name__)

#: Whether the learned face engine serves by default (False: the geometric solver unless the user opts in).
FACE_ENGINE_BY_DEFAULT = False

#: Why the learned face engine is not used unless the user opts in. Measured
#: (models/face_recon.md): on real recordings it does not yet beat the frozen
#: geometric solver everywhere (blink precision/recall 0.94/0.94 vs 1.0/1.0, GRID jawOpen r
#: 0.46/0.52 vs 0.54/0.48), so the solver stays the default.
FACE_ENGINE_OFF_REASON = (
    "the learned face engine does not yet beat the geometric solver on real recordings "
    "(see models/face_recon.md); set AVATAR_APP_FACE_ENGINE=1 to try it"
)
#: Values of AVATAR_APP_FACE_ENGINE that opt in (case-insensitive); "0", "false", "no", "off" opt out.
FACE_ENGINE_OPT_IN = ("1", "true", "yes", "on")
_OPT_OUT = ("0", "false", "no", "off")


def engine_disabled_reason(name: str) -> str | None:
    """Why engine ``name`` ("face_recon", "speech2face") is off by default, or None when it serves.

    The face engine follows :data:`FACE_ENGINE_BY_DEFAULT` unless AVATAR_APP_FACE_ENGINE
    opts in (:data:`FACE_ENGINE_OPT_IN`) or out.
    """
    if name != "face_recon":
        return None
    env = os.environ.get("AVATAR_APP_FACE_ENGINE", "").strip().lower()
    on = env in FACE_ENGINE_OPT_IN or (FACE_ENGINE_BY_DEFAULT and env not in _OPT_OUT)
    return None if on else FACE_ENGINE_OFF_REASON


@dataclass
class StageChoice:
    """What :func:`build_stages` should build.

    Attributes:
        live: the tracker's running mode: True live (newest frame, ns stamps), False
            video (every frame, media time).
        audio: whether there is audio (False: no speech stage).
        slots: engine name -> an open EngineSlot or None (the studio's engine
            controller); None opens the shipped models instead (render, demo).
        face_model: a face_recon ONNX to try whatever the default (None: the shipped one,
            when enabled).
        speech_model: a speech2face ONNX (None: the shipped one).
        manager: the EngineManager that opens model files (None: a new one per engine).
        backend: the engine-layer backend for engines opened from model files (None: the
            fastest available; ``"remote"``: an ``avatar-app serve`` server, see
            :mod:`avatar_app.inference.remote`).
        track: build a face tracker (False: vision comes from elsewhere, the demo).
        tracker: which one: ``auto``, ``onnx`` or ``mediapipe`` (:mod:`avatar_app.tracking.select`).
        tracker_backend / tracker_precision: the ONNX tracker's engine-layer backend and
            precision (None or ``"auto"``: the fastest verified engine; ignored for MediaPipe).
        tracker_fallback: when the ONNX tracker cannot load, run MediaPipe's (``on_fallback``
            hears why) instead of raising (the studio; ``render --tracker onnx`` raises).
        chain: the post-processing settings (default: a fresh studio's).
        on_fallback: hears a sentence for the user when an engine that was asked for
            could not be used and its solver stands in.
    """

    live: bool = False
    audio: bool = True
    slots: Mapping[str, object] | None = None
    face_model: Path | None = None
    speech_model: Path | None = None
    manager: object = None
    backend: str | None = None
    track: bool = True
    tracker: str = "auto"
    tracker_backend: str | None = None
    tracker_precision: str | None = None
    tracker_fallback: bool = False
    chain: ChainSettings = field(default_factory=ChainSettings)
    on_fallback: Callable[[str], None] | None = None


@dataclass
class Stages:
    """The stages of one stream.

    Attributes:
        tracker: FaceTracker or None.
        reconstructor: a FaceReconstructor (EngineReconstructor or GeometricSolver).
        speech: a SpeechAnimator (EngineSpeechAnimator or LoudnessSpeechAnimator) or None.
        chain: the PostChain.
    """

    tracker: object
    reconstructor: object
    speech: object
    chain: PostChain

    @property
    def face_solver(self) -> str:
        """What turns landmarks into blendshapes: "geometric solver" or the engine's description."""
        describe = getattr(self.reconstructor, "describe", None)
        return describe() if describe is not None else "geometric solver"

    def close(self) -> None:
        """Close the tracker (engines opened from model files close with their slots' managers)."""
        if self.tracker is not None:
            self.tracker.close()


def _face(choice: StageChoice):
    from avatar_app.reconstruction.engine import EngineReconstructor, default_model_path
    from avatar_app.reconstruction.geometric import GeometricSolver

    if choice.slots is not None:
        slot = choice.slots.get("face_recon")
        return EngineReconstructor(slot=slot) if slot is not None else GeometricSolver()
    explicit = choice.face_model is not None
    off = None if explicit else engine_disabled_reason("face_recon")
    path = Path(choice.face_model) if explicit else default_model_path()
    if off:
        log.info("face reconstruction: geometric solver (%s)", off)
        return GeometricSolver()
    if not path.is_file():
        log.info("no face reconstruction model at %s; using the geometric solver", path)
        _tell(choice, f"the learned face engine was asked for but {path} does not exist; the "
                      "geometric solver tracks the face instead")
        return GeometricSolver()
    try:
        return EngineReconstructor(path, manager=choice.manager, backend=choice.backend)
    except AvatarError as exc:
        log.warning("face reconstruction engine unavailable (%s); using the geometric solver", exc)
        _tell(choice, f"the learned face engine cannot be used ({exc}); the geometric solver "
                      "tracks the face instead")
        return GeometricSolver()


def _speech(choice: StageChoice):
    from avatar_app.speech.engine_animator import (
        EngineSpeechAnimator,
        default_model_path,
    )
    from avatar_app.speech.loudness import LoudnessSpeechAnimator

    if not choice.audio:
        return None
    if choice.slots is not None:
        slot = choice.slots.get("speech2face")
        return EngineSpeechAnimator(slot=slot) if slot is not None else LoudnessSpeechAnimator()
    path = Path(choice.speech_model) if choice.speech_model is not None else default_model_path()
    if not path.is_file():
        log.info("no speech model at %s; using the loudness solver", path)
        return LoudnessSpeechAnimator()
    try:
        return EngineSpeechAnimator(path, manager=choice.manager, backend=choice.backend)
    except AvatarError as exc:
        log.warning("speech engine unavailable (%s); using the loudness solver", exc)
        return LoudnessSpeechAnimator()


def _tell(choice: StageChoice, message: str) -> None:
    if choice.on_fallback is not None:
        choice.on_fallback(message)


def build_reconstructor(choice: StageChoice):
    """Only the face stage of :func:`build_stages` (an engine swap in the studio)."""
    return _face(choice)


def build_speech(choice: StageChoice):
    """Only the speech stage of :func:`build_stages` (None without audio)."""
    return _speech(choice)


def build_tracker(choice: StageChoice):
    """Only the face tracker of :func:`build_stages` (a tracker switch in the studio).

    Returns:
        A FaceTracker (MediaPipe's or the ONNX tracker) in the choice's running mode.

    Raises:
        InputError: an unknown tracker name.
        AvatarError: the tracker cannot start (an ONNX tracker that does not load only
            without ``choice.tracker_fallback``; with it, MediaPipe's serves instead).
    """
    from avatar_app.tracking.face_mesh import RunningMode
    from avatar_app.tracking.select import make_tracker, resolve_tracker

    mode = RunningMode.LIVE if choice.live else RunningMode.VIDEO
    backend = None if choice.tracker_backend in (None, "auto") else choice.tracker_backend
    kind = resolve_tracker(choice.tracker)
    if kind == "mediapipe":
        return make_tracker("mediapipe", mode)
    try:
        return make_tracker("onnx", mode, backend=backend, precision=choice.tracker_precision,
                            manager=choice.manager)
    except AvatarError as exc:
        if not choice.tracker_fallback:
            raise
        log.warning("ONNX tracker unavailable (%s); using MediaPipe's", exc)
        _tell(choice, f"the ONNX tracker cannot be used ({_bare(exc)}); MediaPipe tracks the face instead")
        return make_tracker("mediapipe", mode)


def _bare(exc: BaseException) -> str:
    """An error's text without its trailing full stop (for embedding in a sentence)."""
    return str(exc).strip().rstrip(".")


def build_stages(choice: StageChoice | None = None, expressions=None, reconstructor=None,
                 speech=None, chain: PostChain | None = None) -> Stages:
    """Build the stages of one stream (see the module docstring for the policy).

    Args:
        choice: what to build (default: offline, with audio, the shipped models).
        expressions: the ExpressionLayer to share with hotkeys (studio), or None.
        reconstructor: a FaceReconstructor to use instead of the policy's (tests, benchmarks).
        speech: a SpeechAnimator to use instead of the policy's.
        chain: an existing PostChain to run (the studio keeps one across sources) instead of
            a new one made from ``choice.chain``.

    Returns:
        :class:`Stages`; call ``close()`` when done.

    Raises:
        AvatarError: the face tracker cannot start.
    """
    choice = choice or StageChoice()
    recon = reconstructor if reconstructor is not None else _face(choice)
    speech = speech if speech is not None else _speech(choice)
    tracker = build_tracker(choice) if choice.track else None
    return Stages(tracker, recon, speech, chain if chain is not None else PostChain(choice.chain, expressions))
