"""Swapping stages of the studio's running pipeline: the engine wrappers and the face tracker.

- :func:`attach_engines` gives the running pipeline the face/speech wrapper of an
  engine slot that has just opened (the slot itself swaps backends and precisions);
  the face engine's only while the face path is the engine.
- :func:`swap_face` gives it the face path the user chose (the geometric solver or the
  learned engine), the same way: built on the session's worker, assigned between two frames.
- :class:`TrackerController` is the Engines panel's Tracking row without Qt: the
  user's tracker (Auto, MediaPipe, the ONNX landmark engines with a backend and a
  precision), what Auto resolves to here, why an option cannot be chosen, and
  the switch: the new tracker is built on the controller's own thread while the
  current one keeps tracking, then handed to the pipeline, which swaps it in
  between two frames (:meth:`~avatar_app.pipeline.live.LivePipeline.replace_tracker`).
  An ONNX tracker that does not load leaves the current tracker running (a new
  source falls back to MediaPipe's) and says why; a precision that did not pass
  verification is named with what serves instead.

Thread: call from the session's controlling thread; builds run on the
"tracker-builder" thread, results come back through the session's ``dispatch``.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from avatar_app.core.errors import AvatarError
from avatar_app.pipeline import settings as store
from avatar_app.pipeline.stages import (
    StageChoice,
    build_reconstructor,
    build_speech,
    build_tracker,
    resolve_face_path,
)

log = logging.getLogger(__name__)

#: Labels of the Tracking row's trackers (``auto``'s gets what it resolves to).
TRACKER_LABELS = {"auto": "Auto", "mediapipe": "MediaPipe", "onnx": "ONNX engines"}
#: Short names of the ONNX tracker's engines, in LandmarkEngines' order.
_ENGINE_NAMES = ("detector", "mesh")


# ---------------------------------------------------------------------------- engine wrappers
def attach_engines(session) -> None:
    """Give the running pipeline an engine whose slot has just opened (swapped between two frames).

    The wrapper (EngineReconstructor / EngineSpeechAnimator) is built on the
    session's worker thread and assigned to the pipeline's processor there: the
    processing thread reads it once per frame. The slot object stays the same
    across backend/precision switches, so this happens once per pipeline and
    engine; the neutral face is carried over. The face engine is attached only while the
    session's face path (``settings.engines.face``) resolves to the engine.
    """
    pipe = session.pipeline
    if pipe is None:
        return
    speech_slot, face_slot = session.engines.slot("speech2face"), session.engines.slot("face_recon")
    want_speech = (speech_slot is not None and pipe.ring is not None
                   and getattr(pipe.processor.speech, "slot", None) is not speech_slot)
    want_face = (face_slot is not None and resolve_face_path(session.settings.engines.face) == "engine"
                 and getattr(pipe.processor.reconstructor, "slot", None) is not face_slot)
    if want_speech or want_face:
        session.worker.submit(_attach, session, pipe, want_speech, want_face, session.neutral_landmarks)


def _attach(session, pipe, want_speech: bool, want_face: bool, neutral) -> None:
    if session.pipeline is not pipe:
        return
    choice = StageChoice(live=True, slots=session.slots(), face=session.settings.engines.face)
    if want_speech:
        try:
            f = session.speech_factory
            speech = f(session.engines) if f is not None else build_speech(choice)
            if speech is not None:
                pipe.processor.speech = speech
        except AvatarError as exc:
            log.warning("speech engine not attached: %s", exc)
    if want_face:
        try:
            f = session.reconstructor_factory
            recon = f(session.engines) if f is not None else build_reconstructor(choice)
            if recon is not None:
                if neutral is not None:
                    recon.calibrate_neutral(neutral)
                pipe.processor.reconstructor = recon
                # what drives the face changed: the face row and the status bar say so
                session.dispatch(lambda: session.events.engine_changed.emit("face_recon"))
        except AvatarError as exc:
            log.warning("face reconstruction engine not attached: %s", exc)


def swap_face(session) -> Future | None:
    """Give the running pipeline the session's face path (``settings.engines.face``), between two frames.

    The reconstructor is built on the session's worker thread (as :func:`attach_engines` does):
    the geometric solver, or the learned engine on the controller's open slot (the session's
    ``reconstructor_factory`` when given), or the solver while that slot is not open (it is
    attached once it opens). The neutral face is carried over; frames keep flowing meanwhile.

    Returns:
        A Future resolving to the reconstructor handed to the pipeline (None: no pipeline, or
        another pipeline runs by then); ``session.events.engine_changed("face_recon")`` follows
        on the controlling thread.
    """
    pipe = session.pipeline
    if pipe is None:
        return None
    return session.worker.submit(_swap_face, session, pipe, session.settings.engines.face)


def _swap_face(session, pipe, face: str):
    """Build the reconstructor of ``face`` and hand it to ``pipe`` (the session's worker thread)."""
    if session.pipeline is not pipe:
        return None
    recon = None
    f = session.reconstructor_factory
    if resolve_face_path(face) == "engine" and f is not None:
        recon = f(session.engines)
    if recon is None:
        recon = build_reconstructor(StageChoice(live=True, slots=session.slots(), face=face))
    neutral = session.neutral_landmarks
    if neutral is not None:
        try:
            recon.calibrate_neutral(neutral)
        except AvatarError as exc:  # the new path starts from its automatic neutral instead
            log.warning("the neutral face was not carried over to the %s: %s", face, exc)
    pipe.processor.reconstructor = recon
    session.dispatch(lambda: session.events.engine_changed.emit("face_recon"))
    return recon


# ---------------------------------------------------------------------------- the tracker
class TrackerController:
    """The Tracking row of the Engines panel (see the module docstring).

    Args:
        session: the :class:`~avatar_app.pipeline.session.StudioSession` (its settings,
            engines, pipeline, events and dispatch).

    Attributes:
        error: why the last ONNX tracker did not load, as the user should read it ("" when none).
        notice: which asked-for precision did not pass verification and what serves instead, one
            short line ("" when none). notice_detail: the same per engine with the full reasons.
        building: a tracker is being built: a switch (the current one keeps tracking) or a new
            source's ONNX tracker (:meth:`source_build`; ``for_source`` is then True).
        build_fraction: how far the build of the ONNX tracker's engines is, in [0, 1], over both
            (detector then mesh: each counts half); 0 when none runs or an engine loads from the cache.
        build_stage: what the build does now, e.g. ``"mesh (2 of 2): building ort_cpu"`` ("" when none).
        swaps: trackers handed to a running pipeline.
        said: the last status-bar message about the tracker ("" when none): stale once a new choice
            is requested (``building``); the window then clears it if it still shows.

    Progress comes from the engine layer's build reports, as the engine rows' do: the
    session's :class:`~avatar_app.pipeline.engines.EngineController` emits ``progress`` for every
    report of its manager, which also opens the tracker's engines.

    Events: ``session.events.engine_changed("tracker")`` after every change (controlling thread).
    """

    NAME = "tracker"

    def __init__(self, session):
        self.session = session
        self.error = ""
        self.notice = ""
        self.notice_detail = ""
        self.said = ""
        self.building = False
        self.build_fraction = 0.0
        self.build_stage = ""
        self.for_source = False
        self.swaps = 0
        self._generation = 0
        self._building_gen = 0  # the generation whose build runs (read on the builder thread)
        self._source_gen: int | None = None  # the generation a new source's tracker builds in (opener thread)
        self._infos: dict[str, object] | None = None  # model stem -> ModelInfo, read on the builder
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracker-builder")
        progress = getattr(session.engines, "progress", None)
        if progress is not None:
            progress.connect(self._on_build_progress)

    # -- the choice ------------------------------------------------------------------
    @property
    def choice(self) -> dict:
        """The persisted choice: ``{"kind", "backend", "precision"}`` (settings.EngineChoice.tracker)."""
        return self.session.settings.engines.tracker

    def start(self) -> Future:
        """Read the landmark models' metadata (allowed precisions) in the background."""
        return self._pool.submit(self._read_infos)

    def _read_infos(self) -> None:
        from avatar_app.tracking.onnx_tracker import model_paths

        infos = {}
        for path in model_paths():
            if path.is_file():
                try:
                    infos[path.stem] = self.session.engines.manager.model_info(path)
                except AvatarError as exc:
                    log.warning("landmark model %s unreadable: %s", path.name, exc)
        self._infos = infos
        self._changed()

    def stage_fields(self) -> dict:
        """The :class:`StageChoice` fields of the choice (an ONNX tracker that failed: MediaPipe's)."""
        c = self.choice
        kind = "mediapipe" if c["kind"] == "onnx" and self.error else c["kind"]
        return {"tracker": kind, "tracker_backend": c["backend"], "tracker_precision": c["precision"],
                "tracker_fallback": True, "manager": self.session.engines.manager}

    # -- what the panel shows -----------------------------------------------------------
    def auto_kind(self) -> str | None:
        """What Auto resolves to here (``"onnx"``/``"mediapipe"``), None until the backend probe ends."""
        from avatar_app.tracking.select import GPU_BACKENDS, auto_tracker

        statuses = self.session.engines.statuses
        if statuses is None:
            return None
        gpu = next((n for n in GPU_BACKENDS if n in statuses and statuses[n].can_run), None)
        return auto_tracker(gpu)

    def label(self, kind: str) -> str:
        """The row's text for ``kind``: ``Auto (MediaPipe on this CPU)``, ``MediaPipe``, ``ONNX engines``."""
        if kind != "auto":
            return TRACKER_LABELS[kind]
        auto = self.auto_kind()
        if auto is None:
            return "Auto (checking this machine…)"
        return "Auto (ONNX engines on the GPU)" if auto == "onnx" else "Auto (MediaPipe on this CPU)"

    def kind_reason(self, kind: str) -> str | None:
        """Why tracker ``kind`` cannot be chosen here, or None."""
        if kind != "onnx":
            return None
        from avatar_app.tracking.onnx_tracker import model_paths

        missing = [p.name for p in model_paths() if not p.is_file()]
        return f"landmark models not installed ({', '.join(missing)})" if missing else None

    def backend_reason(self, backend: str) -> str | None:
        """Why the ONNX tracker cannot run on ``backend`` here, or None."""
        from avatar_app.pipeline.engines import BACKEND_LABELS

        why = self.kind_reason("onnx")
        statuses = self.session.engines.statuses
        if why or backend == "auto":
            return why
        if statuses is None:
            return "checking what this machine can run…"
        st = statuses.get(backend)
        if st is None:
            return f"{BACKEND_LABELS.get(backend, backend)} is not part of this installation"
        return None if st.can_run else (st.reason or "cannot run on this machine")

    def precision_reason(self, backend: str, precision: str) -> str | None:
        """Why the ONNX tracker cannot run in ``precision`` on ``backend``, or None."""
        from avatar_app.inference import Precision

        why = self.backend_reason(backend)
        if why:
            return why
        for info in (self._infos or {}).values():
            if Precision.parse(precision) not in info.precisions:
                return f"{info.path.name} is not made for {precision.upper()}"
        statuses = self.session.engines.statuses or {}
        names = [backend] if backend != "auto" else [n for n, s in statuses.items() if s.can_run]
        reasons = [statuses[b].precisions.get(precision) for b in names if b in statuses]
        if not reasons or any(not r for r in reasons):
            return None
        return reasons[0]

    def serving(self) -> str:
        """What tracks the running pipeline's faces: ``MediaPipe (CPU)``,
        ``ONNX engines: ONNX Runtime CPU (detector FP32, mesh FP16)``, or "" without a pipeline."""
        from avatar_app.pipeline.engines import BACKEND_LABELS
        from avatar_app.tracking.select import tracker_kind

        pipe = self.session.pipeline
        tracker = pipe.tracker if pipe is not None else None
        kind = tracker_kind(tracker)
        if kind != "onnx":
            return "MediaPipe (CPU)" if kind else ""
        try:
            runners = [s.active for s in tracker.engines.slots]
        except AvatarError:
            return "ONNX engines (closed)"
        backends = sorted({BACKEND_LABELS.get(r.backend, r.backend) for r in runners})
        parts = ", ".join(f"{n} {r.precision.value.upper()}" for n, r in zip(_ENGINE_NAMES, runners))
        return f"ONNX engines: {' / '.join(backends)} ({parts})"

    def short(self) -> str:
        """For the status bar: ``MediaPipe`` or ``ONNX FP32``."""
        text = self.serving()
        if not text.startswith("ONNX"):
            return text.split(" (")[0] or "none"
        precisions = {w.rstrip(",)") for w in text.split("(")[-1].split() if w.rstrip(",)").isupper()}
        return "ONNX " + "/".join(sorted(precisions))

    # -- the switch ---------------------------------------------------------------------
    def request(self, kind: str, backend: str = "auto", precision: str | None = None) -> Future:
        """Choose the tracker (persisted) and switch the running pipeline to it in the background.

        Args:
            kind: ``auto``, ``mediapipe`` or ``onnx``.
            backend: the ONNX tracker's engine-layer backend ("auto" = fastest verified).
            precision: its precision (None = the backend's default).

        Returns:
            A Future resolving to the tracker handed to the pipeline (None: none runs, or a
            later request superseded this one); errors are kept in :attr:`error`, not raised.

        Raises:
            InputError: a value that is not a choice of the row (named).
        """
        from avatar_app.core.errors import InputError

        report: list[str] = []
        chosen = store.validate_tracker({"kind": kind, "backend": backend, "precision": precision}, report,
                                        "tracker")
        if report:
            raise InputError("; ".join(report))
        self.session.settings.engines.tracker = chosen
        store.save_area(self.session.store, self.session.settings.engines)
        self._generation += 1
        self.error = self.notice = self.notice_detail = ""
        self.building, self.for_source = True, False
        self.build_fraction, self.build_stage = 0.0, ""
        self._changed()
        return self._pool.submit(self._build, self._generation, dict(chosen), self.session.pipeline)

    def _build(self, gen: int, chosen: dict, pipe):
        """Build the chosen tracker and hand it to ``pipe`` (builder thread)."""
        if gen != self._generation:
            return None
        self._building_gen = gen
        choice = StageChoice(live=True, tracker=chosen["kind"], tracker_backend=chosen["backend"],
                             tracker_precision=chosen["precision"], manager=self.session.engines.manager)
        try:
            tracker = build_tracker(choice)
        except AvatarError as exc:
            log.warning("tracker %s not loaded: %s", chosen, exc)
            self.session.dispatch(lambda e=exc: self._failed(gen, e, pipe))
            return None
        finally:
            self._building_gen = 0
        if gen != self._generation or pipe is None or self.session.pipeline is not pipe or not pipe.running:
            tracker.close()
            self.session.dispatch(lambda: self._done(gen, ""))
            return None
        pipe.replace_tracker(tracker, retire=self._retire)
        self.swaps += 1
        falls = self._fallbacks(tracker, chosen)
        self.session.dispatch(lambda: self._done(gen, self.short_notice(falls), self._fell_back(tracker, chosen)))
        return tracker

    def builds_engines(self, kind: str | None = None) -> bool:
        """Whether a new source's tracker is the ONNX engines (built by the engine layer: seconds to a
        minute the first time), not MediaPipe's (loads in a moment).

        Args:
            kind: ``onnx``, ``auto`` (counts when it resolves to the ONNX engines here) or ``mediapipe``;
                None: what :meth:`stage_fields` builds now.
        """
        kind = self.stage_fields()["tracker"] if kind is None else kind
        return kind == "onnx" or (kind == "auto" and self.auto_kind() == "onnx")

    @contextmanager
    def source_build(self, kind: str) -> Iterator[None]:
        """Around the build of a new source's stages (the opener thread): an ONNX tracker built there
        (the choice at start-up, or a new source) shows the same progress as a switch.

        Args:
            kind: the tracker the stages build (``StageChoice.tracker``: ``onnx``, ``auto``, ``mediapipe``);
                ``auto`` counts when it resolves to the ONNX engines here.

        While the block runs, :attr:`building` and :attr:`for_source` are True (set through the session's
        ``dispatch``) and the engine layer's reports of the tracker's models move :attr:`build_fraction`;
        both are cleared at the end. A switch requested meanwhile takes the row over.
        """
        if not self.builds_engines(kind):
            yield
            return
        gen = self._generation
        self._source_gen = gen
        self.session.dispatch(lambda: self._source_started(gen))
        try:
            yield
        finally:
            self._source_gen = None
            self.session.dispatch(lambda: self._source_done(gen))

    def _source_started(self, gen: int) -> None:
        if gen != self._generation or self.building:
            return
        self.building, self.for_source = True, True
        self.build_fraction, self.build_stage = 0.0, ""
        self._changed()

    def _source_done(self, gen: int) -> None:
        if gen != self._generation or not self.for_source:
            return
        self.building = self.for_source = False
        self.build_fraction, self.build_stage = 0.0, ""
        self._changed()

    def _on_build_progress(self, model_path, stage: str, fraction: float) -> None:
        """A build report of the engine layer (the builder or the opener thread): the tracker's own
        models only, while a switch (:meth:`request`) or a new source (:meth:`source_build`) builds them."""
        gen = self._building_gen if self._building_gen else self._source_gen
        if gen is None:
            return  # not this controller's build (an engine row's)
        from pathlib import Path

        from avatar_app.tracking.onnx_tracker import model_paths

        try:
            paths = [p.resolve() for p in model_paths()]
            i = paths.index(Path(model_path).resolve())
        except (OSError, ValueError):
            return
        overall = (i + min(max(float(fraction), 0.0), 1.0)) / len(paths)
        text = f"{_ENGINE_NAMES[i]} ({i + 1} of {len(paths)}): {stage}"
        self.session.dispatch(lambda: self._progress(gen, text, overall))

    def _progress(self, gen: int, text: str, fraction: float) -> None:
        if gen != self._generation or not self.building:
            return
        self.build_stage, self.build_fraction = text, fraction
        # Already on the controlling thread: emit now, so each report's refresh shows its own value (a
        # second dispatch would queue the event behind later reports, which then all show the last).
        self.session.events.engine_changed.emit(self.NAME)

    def _retire(self, old) -> None:
        """Close a replaced tracker on the builder thread (processing thread: must not raise)."""
        try:
            self._pool.submit(old.close)
        except RuntimeError:  # the builder is shut down (the session closes)
            old.close()

    @staticmethod
    def _fallbacks(tracker, chosen: dict) -> list[tuple[str, str, str, str]]:
        """(engine, asked precision, serving precision, why) for each engine that fell back."""
        if chosen["kind"] == "mediapipe" or chosen["precision"] in (None, "fp32"):
            return []
        out = []
        for name, slot in zip(_ENGINE_NAMES, getattr(getattr(tracker, "engines", None), "slots", ())):
            res = slot.result
            runner = slot.active
            if res is not None and runner.precision.value != chosen["precision"]:
                tried = [a for a in res.attempts if not a.ok and a.precision == chosen["precision"]]
                # the reason on the backend that serves, else the last backend tried (not the first
                # backend of the plan that is merely not installed)
                why = next((a.reason for a in tried if a.backend == runner.backend), tried[-1].reason if tried else "")
                out.append((name, chosen["precision"].upper(), runner.precision.value.upper(), why))
        return out

    @classmethod
    def _fell_back(cls, tracker, chosen: dict) -> str:
        """Which asked-for precision did not pass verification, and why, one line per engine ("" when all did)."""
        return "\n".join(f"{asked} {name} not verified, {serving} serves" + (f": {why}" if why else "")
                          for name, asked, serving, why in cls._fallbacks(tracker, chosen))

    @staticmethod
    def short_notice(fallbacks: list[tuple[str, str, str, str]]) -> str:
        """One short line for the Tracking row and the status bar ("" for no fallback), e.g.
        ``"FP16 not used for detector and mesh (no face samples to check it): FP32 serves"``."""
        from avatar_app.inference.calibration import REAL_DATA_ONLY

        if not fallbacks:
            return ""
        names = " and ".join(f[0] for f in fallbacks)
        asked, serving = fallbacks[0][1], fallbacks[0][2]
        # the common case in user terms; any other reason is in notice_detail (the row's tooltip)
        why = " (no face samples installed to check it)" if all(REAL_DATA_ONLY in f[3] for f in fallbacks) else ""
        return f"{asked} not used for {names}{why}: {serving} serves"

    def _failed(self, gen: int, exc: Exception, pipe) -> None:
        if gen != self._generation:
            return
        self.building = self.for_source = False
        self.build_fraction, self.build_stage = 0.0, ""
        running = self.serving() or "MediaPipe"
        self.error = f"The ONNX tracker could not be loaded ({str(exc).rstrip('.')}); {running} keeps tracking."
        self._say(self.error)
        self._changed()

    def _done(self, gen: int, notice: str, detail: str = "") -> None:
        if gen != self._generation:
            return
        self.building, self.for_source, self.notice, self.notice_detail = False, False, notice, detail
        self.build_fraction, self.build_stage = 0.0, ""
        if notice:
            self._say(f"Tracking: {notice}")
        self._changed()

    def note_fallback(self, message: str) -> None:
        """A new pipeline's ONNX tracker did not load and MediaPipe's runs (any thread)."""
        text = message[:1].upper() + message[1:]
        self.session.dispatch(lambda: self._fallback(text))

    def _fallback(self, text: str) -> None:
        self.error = text.rstrip(".") + "."
        self._say(self.error)
        self._changed()

    def _say(self, text: str) -> None:
        self.said = text
        self.session.events.status.emit(text, 10000)

    def _changed(self) -> None:
        self.session.dispatch(lambda: self.session.events.engine_changed.emit(self.NAME))

    def close(self) -> None:
        """Stop the builder (waits for a running build; its tracker is closed unused)."""
        self._generation += 1
        self._pool.shutdown(wait=True, cancel_futures=True)
