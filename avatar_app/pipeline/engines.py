"""The studio's engines: one EngineSlot per learned model, probed and switched off the GUI thread.

:class:`EngineController` owns an :class:`~avatar_app.inference.EngineSlot` for
every engine whose model file exists (``models/face_recon.onnx``,
``models/speech2face.onnx``), probes the backends once in the background, and
answers the Engines panel: which (backend, precision) options this machine can
run and why not, what serves now, the verification of the active engine, and
the progress of a background build. A switch builds and verifies the new engine
while the current one keeps serving (the slot swaps between two calls).

The face engine's slot opens whatever the face path: the user's choice between the
geometric solver and the learned engine is the session's (``settings.engines.face``,
:func:`~avatar_app.pipeline.stage_swaps.swap_face`), so switching to the engine is
instant once it is open, and its backend and precision can be chosen either way.

Qt-free: changes are announced as plain events (:class:`~avatar_app.core.events.Event`)
emitted on the worker threads; the studio's Qt bridge turns them into signals.

Thread: create and call from one controlling thread (the GUI's in the studio);
work runs on the controller's worker thread and on each slot's swap thread.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.errors import AvatarError
from avatar_app.core.events import Event
from avatar_app.inference import (
    BackendStatus,
    CalibrationStore,
    EngineManager,
    EngineSlot,
    ModelInfo,
    Precision,
    backend_statuses,
    live_child_duty,
)

log = logging.getLogger(__name__)

#: Engines of the app: name (= model file stem) -> label.
ENGINES: dict[str, str] = {"face_recon": "Face reconstruction", "speech2face": "Speech"}
#: What serves an engine when its model is not installed.
FALLBACKS: dict[str, str] = {"face_recon": "geometric solver", "speech2face": "loudness solver"}
#: Backend choices of the panel; "auto" = the fastest verified engine.
BACKEND_LABELS: dict[str, str] = {
    "auto": "Auto", "tensorrt": "TensorRT", "tensorrt_rtx": "TensorRT for RTX",
    "ort_tensorrt": "ONNX Runtime TensorRT", "ort_cuda": "ONNX Runtime CUDA", "ort_cpu": "ONNX Runtime CPU",
}
PRECISIONS = ("fp32", "fp16", "int8")

#: The verification line of an engine that is its own reference (FP32: nothing to compare it with).
REFERENCE_ENGINE_NOTE = "reference engine (the verification baseline)"

#: ``sample_fn(landmarks, neutral, audio_window) -> feeds or None``: one calibration sample
#: from a tracked frame. landmarks: the frame's Landmarks (478 points) or None when no face
#: was found; neutral: the neutral face's Landmarks or None; audio_window: (N,) float32 16 kHz
#: audio ending at the frame, or None when the user is not talking.
SampleFn = Callable[[object, object, "np.ndarray | None"], "dict[str, np.ndarray] | None"]


def default_model_path(name: str) -> Path:
    """``models/<name>.onnx`` in the source tree, wheel or bundle (may not exist)."""
    from avatar_app.resources import resource_path

    return Path(resource_path(f"models/{name}.onnx"))


def face_recon_sample(landmarks, neutral, audio) -> dict[str, np.ndarray] | None:
    """face_recon inputs of one frame (``landmarks`` and ``neutral``, each (1, 478, 3) float32 metres).

    The engine's own pre-processing (:func:`avatar_app.reconstruction.engine.engine_feeds`,
    the code :class:`~avatar_app.reconstruction.engine.EngineReconstructor` runs, with its
    default field of view). Returns None without a face or without a neutral face.
    """
    if landmarks is None or neutral is None:
        return None
    from avatar_app.reconstruction.engine import engine_feeds

    return engine_feeds(landmarks, neutral)


def speech_sample(landmarks, neutral, audio) -> dict[str, np.ndarray] | None:
    """speech2face input of one frame: ``features`` (1, T, 64) log-mel of the last second of audio."""
    if audio is None or len(audio) < 1600:
        return None
    from avatar_app.speech.mel import log_mel

    feats = np.asarray(log_mel(np.asarray(audio, np.float32)[-16000:]), np.float32)
    return {"features": feats[None]} if feats.ndim == 2 and 10 <= feats.shape[0] <= 300 else None


DEFAULT_SAMPLE_FNS: dict[str, SampleFn] = {"face_recon": face_recon_sample, "speech2face": speech_sample}


@dataclass
class EngineEntry:
    """What the controller knows of one engine.

    Attributes:
        name: engine name (model stem of the app: "face_recon", "speech2face").
        label: text for the panel.
        model_path: the FP32 ONNX (None or missing = not installed).
        slot: the EngineSlot once opened.
        info: the model's ModelInfo once read.
        choice: (backend or "auto", precision or None) the user asked for.
        build_stage / build_fraction: progress of a running build ("" when none).
        error: the last failed request or open, as text.
        sample_fn: makes one calibration sample from a frame (see SampleFn).
    """

    name: str
    label: str
    model_path: Path | None
    slot: EngineSlot | None = None
    info: ModelInfo | None = None
    choice: tuple[str, str | None] = ("auto", None)
    build_stage: str = ""
    build_fraction: float = 0.0
    error: str = ""
    sample_fn: SampleFn | None = None
    futures: list[Future] = field(default_factory=list)

    @property
    def installed(self) -> bool:
        """Whether the model file exists."""
        return self.model_path is not None and self.model_path.is_file()


class _ReportingManager(EngineManager):
    """An EngineManager that reports every build's progress to a callback."""

    def __init__(self, on_progress: Callable[[Path, str, float], None], **kwargs):
        super().__init__(**kwargs)
        self._on_progress = on_progress

    def open_engine(self, model_path, backend=None, precision=None, *, card=None, progress=None):
        def report(stage: str, fraction: float) -> None:
            self._on_progress(Path(model_path), stage, fraction)
            if progress is not None:
                progress(stage, fraction)

        return super().open_engine(model_path, backend, precision, card=card, progress=report)


class EngineController:
    """Engine slots of the app and the facts the Engines panel shows.

    Args:
        models: engine name -> ONNX path (default :func:`default_model_path` for each of
            :data:`ENGINES`); a test may map "face_recon" to a tiny stand-in model.
        isolate: build in child processes (as the app does; see EngineManager).
        cache: EngineCache (default: the user cache directory).
        calibration_root: root of the recorded calibration samples (default user data dir).
        sample_fns: engine name -> SampleFn (default :data:`DEFAULT_SAMPLE_FNS`).

    Events (emitted on worker threads):
        changed(str): an engine's slot, choice, build progress or error changed.
        statuses_ready(): the backend probe finished.
        progress(Path, str, float): every build report of :attr:`manager`, also of engines that
            are not entries (the tracker's detector and mesh): model path, stage text, fraction
            of that model's build in [0, 1]; on the thread that builds.
    """

    def __init__(self, models: Mapping[str, Path | None] | None = None, isolate: bool = True, cache=None,
                 calibration_root: Path | None = None, sample_fns: Mapping[str, SampleFn] | None = None):
        self.changed = Event("engine changed")
        self.statuses_ready = Event("backend statuses ready")
        self.progress = Event("engine build progress")
        paths = {n: default_model_path(n) for n in ENGINES}
        paths.update(models or {})
        fns = dict(DEFAULT_SAMPLE_FNS)
        fns.update(sample_fns or {})
        self.entries: dict[str, EngineEntry] = {
            n: EngineEntry(n, ENGINES.get(n, n), Path(p) if p else None, sample_fn=fns.get(n))
            for n, p in paths.items()}
        self.manager = _ReportingManager(self._on_progress, cache=cache, isolate=isolate,
                                         calibration_root=calibration_root, child_duty=live_child_duty())
        self.statuses: dict[str, BackendStatus] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engines")
        self._lock = threading.Lock()
        self._closed = False

    # -- start-up ---------------------------------------------------------------------
    def start(self, choices: Mapping[str, Mapping[str, str | None]] | None = None) -> Future:
        """Probe the backends and open every installed engine, in the background.

        Args:
            choices: engine -> {"backend": name or "auto", "precision": value or None}
                (the persisted choice).

        Returns:
            Future resolving when every slot is open (exceptions are kept in the entries).
        """
        for name, c in (choices or {}).items():
            if name in self.entries:
                self.entries[name].choice = (c.get("backend") or "auto", c.get("precision"))
        return self._pool.submit(self._start)

    def _start(self) -> None:
        try:
            sts = {s.name: s for s in backend_statuses()}
        except Exception as exc:  # noqa: BLE001 - a broken probe must not stop the app
            log.warning("probing inference backends failed: %s", exc)
            sts = {}
        self.statuses = sts
        self._emit_statuses()
        for e in self.entries.values():
            if self._closed:
                return
            if not e.installed:
                continue
            try:
                e.info = self.manager.model_info(e.model_path)
                slot = EngineSlot(self.manager, e.model_path, on_change=self._slot_changed(e.name))
                backend, precision = e.choice
                slot.open(None if backend == "auto" else backend, precision)
                e.slot = slot
                e.error = ""
            except AvatarError as exc:
                e.error = str(exc)
                log.warning("engine %s could not be opened: %s", e.name, exc)
            self._emit(e.name)

    # -- events (worker threads) ----------------------------------------------------------
    def _emit(self, name: str) -> None:
        if not self._closed:
            self.changed.emit(name)

    def _emit_statuses(self) -> None:
        if not self._closed:
            self.statuses_ready.emit()

    def _slot_changed(self, name: str):
        def on_change(result, error) -> None:
            e = self.entries[name]
            e.build_stage, e.build_fraction = "", 0.0
            e.error = "" if error is None else str(error)
            self._emit(name)
        return on_change

    def _on_progress(self, model_path: Path, stage: str, fraction: float) -> None:
        if not self._closed:
            self.progress.emit(model_path, stage, float(fraction))
        for e in self.entries.values():
            if e.model_path is not None and Path(e.model_path).resolve() == model_path.resolve():
                e.build_stage, e.build_fraction = stage, float(fraction)
                self._emit(e.name)

    # -- queries -----------------------------------------------------------------------
    def entry(self, name: str) -> EngineEntry:
        """The entry of engine ``name`` (KeyError if unknown)."""
        return self.entries[name]

    def slot(self, name: str) -> EngineSlot | None:
        """The open slot of ``name``, or None (not installed, or still opening)."""
        e = self.entries.get(name)
        return e.slot if e is not None else None

    def backend_reason(self, name: str, backend: str) -> str | None:
        """Why ``backend`` cannot be chosen for engine ``name`` here, or None if it can."""
        e = self.entries[name]
        if not e.installed:
            return f"model not installed ({e.model_path.name if e.model_path else name + '.onnx'})"
        if self.statuses is None:
            return "checking what this machine can run…"
        if backend == "auto":
            return None
        st = self.statuses.get(backend)
        if st is None:
            return f"{BACKEND_LABELS.get(backend, backend)} is not part of this installation"
        if not st.can_run:
            return st.reason or "cannot run on this machine"
        return None

    def precision_reason(self, name: str, backend: str, precision: str) -> str | None:
        """Why ``precision`` cannot be chosen with ``backend`` for ``name``, or None if it can."""
        why = self.backend_reason(name, backend)
        if why:
            return why
        e = self.entries[name]
        if e.info is not None and Precision.parse(precision) not in e.info.precisions:
            return f"{e.info.path.name} is not made for {precision.upper()} (its metadata allows " \
                   f"{', '.join(p.value.upper() for p in e.info.precisions)})"
        names = [backend] if backend != "auto" else [n for n, s in (self.statuses or {}).items() if s.can_run]
        reasons = []
        for b in names:
            st = (self.statuses or {}).get(b)
            if st is None:
                continue
            r = st.precisions.get(precision)
            if not r:
                return None
            reasons.append(r)
        return reasons[0] if reasons else "no backend here runs this precision"

    def active(self, name: str):
        """The runner serving ``name`` now, or None."""
        slot = self.slot(name)
        try:
            return slot.active if slot is not None else None
        except AvatarError:
            return None

    def describe(self, name: str) -> str:
        """Short text for the status bar: ``ONNX Runtime CPU FP32``, or what serves instead."""
        e = self.entries[name]
        runner = self.active(name)
        if runner is not None:
            return f"{BACKEND_LABELS.get(runner.backend, runner.backend)} {runner.precision.value.upper()}"
        if not e.installed:
            return f"{FALLBACKS.get(name, 'fallback')} (no model)"
        if e.error:
            return f"{FALLBACKS.get(name, 'fallback')} (engine failed)"
        return "opening…"

    def verification_text(self, name: str) -> str:
        """The active engine's verification, why a choice fell back, and the last error."""
        e = self.entries[name]
        if not e.installed:
            return f"Model not installed: {e.model_path}. The {FALLBACKS.get(name, 'fallback')} is used."
        lines = []
        runner = self.active(name)
        if runner is not None:
            v = getattr(runner, "verification", None)
            lines.append(v.summary() if v is not None else
                         f"{runner.precision.value.upper()} {REFERENCE_ENGINE_NOTE}")
            res = e.slot.result if e.slot is not None else None
            backend, precision = e.choice
            if res is not None and res.fell_back and backend != "auto":
                # only the user's own choice: why it is not the one serving (Auto's skips are the norm)
                mine = [a for a in res.attempts if not a.ok and a.backend == backend
                        and (precision is None or a.precision == precision)]
                if mine:
                    lines.append(f"{BACKEND_LABELS.get(backend, backend)} {mine[0].precision.upper()} "
                                 f"not used: {mine[0].reason}")
        if e.error:
            # no slot: the engine never opened (a damaged model file at start); else a switch the user asked for
            lines.append(f"Last request failed: {e.error}" if e.slot is not None else f"Could not be opened: {e.error}")
        return "\n".join(lines) if lines else "opening…"

    def pending(self, name: str) -> bool:
        """Whether a switch of ``name`` is still building."""
        slot = self.slot(name)
        return bool(slot is not None and slot.pending)

    # -- actions -----------------------------------------------------------------------
    def request(self, name: str, backend: str, precision: str | None) -> Future | None:
        """Switch ``name`` to (backend, precision) in the background; the current engine keeps serving.

        Args:
            name: engine name.
            backend: a key of :data:`BACKEND_LABELS` ("auto" = fastest available).
            precision: "fp32", "fp16", "int8" or None (the backend's default).

        Returns:
            The slot's Future (resolves to the OpenResult swapped in), or None when the
            engine is not open yet (the choice is kept and used when it opens).
        """
        e = self.entries[name]
        e.choice = (backend, precision)
        if e.slot is None:
            self._emit(name)
            return None
        e.error = ""
        e.build_stage, e.build_fraction = "queued", 0.0
        fut = e.slot.request(None if backend == "auto" else backend, precision)
        e.futures = [f for f in e.futures if not f.done()] + [fut]
        # once the slot is no longer pending (the Future completes after the swap's bookkeeping)
        fut.add_done_callback(lambda f, n=name: self._done(n, f))
        self._emit(name)
        return fut

    def _done(self, name: str, fut: Future) -> None:
        e = self.entries[name]
        if not fut.cancelled() and fut.exception() is not None and not e.error:
            e.error = str(fut.exception())
        if not self.pending(name):
            e.build_stage, e.build_fraction = "", 0.0
        self._emit(name)

    def store(self, name: str) -> CalibrationStore | None:
        """The user's calibration store of ``name`` (None when the model is not installed)."""
        e = self.entries[name]
        if not e.installed:
            return None
        return CalibrationStore(e.model_path.stem, self.manager.calibration_root)

    def close(self) -> None:
        """Stop the worker and close every slot (waits for a running build)."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        for e in self.entries.values():
            if e.slot is not None:
                e.slot.close()
                e.slot = None
