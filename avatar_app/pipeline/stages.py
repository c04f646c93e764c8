"""The stage factory: the one place that decides which engine or solver serves each stage.

``build_stages(choice)`` is used by the studio (live and its offline mode),
``avatar-app render`` and the demo, so they cannot drift apart:

- face: the face path the caller passes (``choice.face``, one of :data:`FACE_PATHS`: the
  studio's persisted Engines-panel choice, ``render --face``): ``solver`` the geometric
  solver, ``engine`` the learned face_recon engine (the solver when it cannot load, and the
  caller hears why), ``default`` whichever :data:`FACE_ENGINE_BY_DEFAULT` names;
- speech (only with audio): the learned speech2face engine when usable, else the
  loudness solver.

"Usable" means: with ``choice.slots`` given (the studio), the slot the engine
controller has open (none yet: the solver serves, never a second engine);
without (render, demo), the shipped model opened through a new EngineManager.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from avatar_app.core.errors import AvatarError, InputError
from avatar_app.fusion.chain import ChainSettings, PostChain

log = logging.getLogger(__name__)

#: Whether the learned face engine is the default face path (False: the geometric solver); the solver
#: stays its fallback when the model cannot load. True since the engine matches the solver on every
#: real-face fidelity figure (within 0.01), beats it on their pooled mean and on London's smiles, and
#: holds the still-photo relations better on held-out London pairs (models/face_recon.md, "Shipped:
#: the ensemble student").
FACE_ENGINE_BY_DEFAULT = True

#: The face paths a caller may ask for (``render --face``, the studio's settings): ``default`` follows
#: :data:`FACE_ENGINE_BY_DEFAULT`.
FACE_PATHS = ("default", "solver", "engine")

#: Why the learned face engine is not the default, shown where :data:`FACE_ENGINE_BY_DEFAULT` is False
#: (the engine is the default since it matched the solver on real recordings: models/face_recon.md).
FACE_ENGINE_OFF_REASON = (
    "the learned engine does not beat the solver on real recordings, see models/face_recon.md"
)


def resolve_face_path(face: str) -> str:
    """The face path that ``face`` asks for: ``"solver"`` or ``"engine"``.

    Args:
        face: one of :data:`FACE_PATHS`; ``"default"`` resolves through :data:`FACE_ENGINE_BY_DEFAULT`
            (read at each call, so a test may patch it).

    Raises:
        InputError: ``face`` is not one of :data:`FACE_PATHS`.
    """
    if face not in FACE_PATHS:
        raise InputError(f"face path {face!r} is not one of {', '.join(FACE_PATHS)}")
    if face == "default":
        return "engine" if FACE_ENGINE_BY_DEFAULT else "solver"
    return face


@dataclass(frozen=True)
class FacePath:
    """Which face path drives the avatar, and why.

    Attributes:
        asked: the caller's choice, one of :data:`FACE_PATHS`.
        chosen: ``"solver"`` or ``"engine"``: ``asked`` resolved (:func:`resolve_face_path`).
        serving: what drives the face: ``"solver"`` or ``"engine"`` (the solver when the engine
            was chosen but could not be used).
        fallback: why the chosen engine could not be used, one clause ("" when it serves or was
            not chosen).
    """

    asked: str
    chosen: str
    serving: str
    fallback: str = ""

    def summary(self) -> str:
        """One line for the user: which path drove the face and why (``render``'s "face path:" line)."""
        if self.serving == "engine":
            return "learned face engine" + (" (the default)" if self.asked == "default" else "")
        if self.chosen == "engine":
            return f"geometric solver, standing in for the learned face engine: {self.fallback or 'it did not load'}"
        if self.asked == "default":
            return f"geometric solver (the default: {FACE_ENGINE_OFF_REASON}; --face engine runs the engine)"
        return "geometric solver (chosen)"


@dataclass
class StageChoice:
    """What :func:`build_stages` should build.

    Attributes:
        live: the tracker's running mode: True live (newest frame, ns stamps), False
            video (every frame, media time).
        audio: whether there is audio (False: no speech stage).
        slots: engine name -> an open EngineSlot or None (the studio's engine
            controller); None opens the shipped models instead (render, demo).
        face: the face path, one of :data:`FACE_PATHS` (``default``: :data:`FACE_ENGINE_BY_DEFAULT`).
        face_model: the face_recon ONNX the engine path opens (None: the shipped one).
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
    face: str = "default"
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
        face_path: which face path drives the face (:class:`FacePath`).
    """

    tracker: object
    reconstructor: object
    speech: object
    chain: PostChain
    face_path: FacePath | None = None

    @property
    def face_solver(self) -> str:
        """What turns landmarks into blendshapes: "geometric solver" or the engine's description."""
        describe = getattr(self.reconstructor, "describe", None)
        return describe() if describe is not None else "geometric solver"

    def close(self) -> None:
        """Close the tracker (engines opened from model files close with their slots' managers)."""
        if self.tracker is not None:
            self.tracker.close()


def _face(choice: StageChoice) -> tuple[object, FacePath]:
    from avatar_app.reconstruction.engine import EngineReconstructor, default_model_path
    from avatar_app.reconstruction.geometric import GeometricSolver

    chosen = resolve_face_path(choice.face)

    def solver(fallback: str = ""):
        return GeometricSolver(), FacePath(choice.face, chosen, "solver", fallback)

    if chosen == "solver":
        log.info("face reconstruction: geometric solver (face path %s)", choice.face)
        return solver()
    if choice.slots is not None:  # the studio: the controller's slot (none yet, or it failed: the solver)
        slot = choice.slots.get("face_recon")
        if slot is None:
            return solver("the engine is not open")
        return EngineReconstructor(slot=slot), FacePath(choice.face, chosen, "engine")
    path = Path(choice.face_model) if choice.face_model is not None else default_model_path()
    if not path.is_file():
        log.info("no face reconstruction model at %s; using the geometric solver", path)
        _tell(choice, f"the learned face engine was asked for but {path} does not exist; the "
                      "geometric solver tracks the face instead")
        return solver(f"{path} does not exist")
    try:
        return (EngineReconstructor(path, manager=choice.manager, backend=choice.backend),
                FacePath(choice.face, chosen, "engine"))
    except AvatarError as exc:
        log.warning("face reconstruction engine unavailable (%s); using the geometric solver", exc)
        _tell(choice, f"the learned face engine cannot be used ({exc}); the geometric solver "
                      "tracks the face instead")
        return solver(f"it could not be loaded ({_bare(exc)})")


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
    """Only the face stage of :func:`build_stages` (an engine or face-path swap in the studio).

    Returns:
        A FaceReconstructor: an EngineReconstructor or the GeometricSolver (see :func:`build_face`).

    Raises:
        InputError: ``choice.face`` is not one of :data:`FACE_PATHS`.
    """
    return _face(choice)[0]


def build_face(choice: StageChoice) -> tuple[object, FacePath]:
    """The face stage of :func:`build_stages` and which path it is.

    Returns:
        (FaceReconstructor, :class:`FacePath`): the engine when ``choice.face`` resolves to it and it
        loads, else the geometric solver; a chosen engine that cannot be used is also told to
        ``choice.on_fallback``.

    Raises:
        InputError: ``choice.face`` is not one of :data:`FACE_PATHS`.
    """
    return _face(choice)


def face_path_of(reconstructor, face: str = "default") -> FacePath:
    """The :class:`FacePath` of a reconstructor built elsewhere (tests, benchmarks, a remote render).

    Args:
        reconstructor: a FaceReconstructor; one with a ``slot`` (an EngineSlot) counts as the engine.
        face: the face path it was asked for (one of :data:`FACE_PATHS`).

    Raises:
        InputError: ``face`` is not one of :data:`FACE_PATHS`.
    """
    chosen = resolve_face_path(face)
    serving = "engine" if getattr(reconstructor, "slot", None) is not None else "solver"
    return FacePath(face, chosen, serving)


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
        speech: a SpeechAnimator to use instead of the policy's (ignored without ``choice.audio``).
        chain: an existing PostChain to run (the studio keeps one across sources) instead of
            a new one made from ``choice.chain``.

    Returns:
        :class:`Stages`; call ``close()`` when done.

    Raises:
        InputError: ``choice.face`` is not one of :data:`FACE_PATHS`.
        AvatarError: the face tracker cannot start.
    """
    choice = choice or StageChoice()
    if reconstructor is not None:
        recon, face_path = reconstructor, face_path_of(reconstructor, choice.face)
    else:
        recon, face_path = _face(choice)
    # no audio: no speech stage, also when the caller made one (render --remote builds its speech runner
    # before it knows the clip is silent; the summary then said the mouth came from speech2face)
    speech = (speech if speech is not None else _speech(choice)) if choice.audio else None
    tracker = build_tracker(choice) if choice.track else None
    return Stages(tracker, recon, speech, chain if chain is not None else PostChain(choice.chain, expressions),
                  face_path)
