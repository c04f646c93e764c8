"""The studio window: avatar viewport with dockable panels, latency plots, status bar, shortcuts.

Layout: the viewport in the centre; Sources (camera, microphone, file, camera
preview) on the left; Engines, Calibration, Tracking, Expressions, Avatar and
Output tabbed on the right; latency plots at the bottom; a toolbar with the
record button. Every dock can be moved, floated or closed (View menu);
Ctrl+H hides them all for a clean capture view. Window layout and every
panel's settings persist in QSettings and are restored on the next start.
Recording (the Record button, Ctrl+R, the clip, its audio and blendshape
track) is ui.recording.RecordingController, owned as ``MainWindow.recording``.

Threads: the GUI thread only shows results. Opening a source (camera open,
face-tracker start), engine builds, backend probing, device listing, avatar
loading and finishing a recording run on worker threads; the processing
thread applies tracking tuning and expressions (ui.tuning.AvatarTuner) through
``LivePipeline.set_post_process``.
"""
from __future__ import annotations

import gc
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QImage, QKeySequence, QPixmap
from PySide6.QtWidgets import QDockWidget, QFileDialog, QLabel, QMainWindow, QMessageBox, QToolBar

# imported here, on the GUI thread, before any worker starts: the device-listing and opener threads
# importing the package at the same time could see it half initialised (circular-import error)
import avatar_app.capture  # noqa: F401,E402
from avatar_app.core.errors import AvatarError
from avatar_app.pipeline import settings as store
from avatar_app.pipeline.engines import EngineController
from avatar_app.ui.panels import plain_error
from avatar_app.ui.priority import ThreadPriorities
from avatar_app.ui.recording import RECORD_FPS, RECORD_SIZE, RecordingController
from avatar_app.fusion.tuning import AvatarTuner, ExpressionLayer, TuningSettings, parse_mix
from avatar_app.ui.viewport import AvatarViewportWidget

log = logging.getLogger(__name__)

#: Sample rate of the source's audio ring (and of recordings), Hz.
AUDIO_RATE = 16000
#: Seconds of per-frame latency history the plots show.
PLOT_WINDOW_S = 30.0
#: Seconds without a face before "No face found" shows (a blink or a turn of the head is not reported).
NO_FACE_DELAY_S = 0.6
#: How long the "Press Ctrl+H to show panels" hint stays on the clean capture view, ms.
CLEAN_VIEW_HINT_MS = 3000


def _sentence(text: str) -> str:
    """``text`` stripped, ending with a full stop (unless it ends with . ! ? or …)."""
    text = text.strip()
    return text + "." if text and text[-1] not in ".!?…" else text


def no_source_caption(error: str, kind: str) -> str:
    """The preview caption when no source runs: what failed, then what to do, as separate sentences.

    Args:
        error: why the source did not open, as the user should read it.
        kind: "camera", "file" or "".
    """
    error = _sentence(error)
    if kind == "camera":
        return f"No source: {error}\nUse File › Open video… to play a file."
    return f"No source: {error}"


@dataclass
class _Opened:
    """Result of opening a source on a worker thread."""

    pipeline: object = None
    mic: object = None
    label: str = ""
    mic_text: str = ""
    error: str = ""
    kind: str = ""
    camera_id: str = ""
    path: Path | None = None
    reconnect: bool = False


def engine_face_reconstructor(engines: EngineController):
    """The learned face reconstructor on the controller's face_recon slot, or None (geometric solver).

    The default ``reconstructor_factory`` of :class:`MainWindow`.
    """
    slot = engines.slot("face_recon")
    if slot is None:
        return None
    from avatar_app.reconstruction.engine import EngineReconstructor

    return EngineReconstructor(slot=slot)


def engine_speech_animator(engines: EngineController):
    """The learned speech animator on the controller's speech2face slot, or None (loudness solver).

    The default ``speech_factory`` of :class:`MainWindow`.
    """
    slot = engines.slot("speech2face")
    if slot is None:
        return None
    from avatar_app.speech.engine_animator import EngineSpeechAnimator

    return EngineSpeechAnimator(slot=slot)


class MainWindow(QMainWindow):
    """The streamer's window.

    Args:
        source: a video file to play live, or None for the camera.
        camera: camera index (default: the last used, else 0).
        settings: QSettings to persist into (tests pass a temporary one).
        engines: the EngineController (default: one over ``models/``; started here).
        reconstructor_factory: ``f(engines) -> FaceReconstructor or None`` used for every
            new pipeline (default: :func:`engine_face_reconstructor`: the face_recon engine
            once its slot is open, attached to the running pipeline when it opens; the
            geometric solver before). Tests wire an EngineSlot stand-in here.
        speech_factory: ``f(engines) -> SpeechAnimator or None`` likewise (default:
            :func:`engine_speech_animator`: the speech2face engine once its slot is open,
            attached to the running pipeline when it opens; the loudness solver before).

    Thread: GUI thread only. Processing runs on the pipeline's thread; this
    window polls its newest state on a display-rate timer.
    """

    _source_ready = Signal(object)
    _avatar_loaded = Signal(object, object)

    def __init__(self, source: Path | None = None, camera: int | None = None, settings: QSettings | None = None,
                 engines: EngineController | None = None,
                 reconstructor_factory: Callable | None = None, speech_factory: Callable | None = None):
        super().__init__()
        # tooltips also while a message box or another program is active: the disabled Record
        # button's tooltip says why it is disabled
        self.setAttribute(Qt.WidgetAttribute.WA_AlwaysShowToolTips)
        self.settings = settings or QSettings("avatar_app", "avatar_app")
        self.setWindowTitle("avatar_app studio")
        self.pipeline = None
        self.mic = None
        #: Record button, Ctrl+R, the clip, its audio and blendshape track (ui/recording.py).
        self.recording = RecordingController(self, AUDIO_RATE)
        #: The last information message shown with :meth:`_show_info`.
        self.last_info: str | None = None
        self._no_face_since: float | None = None
        #: Whether "No face found" is shown (the source runs, the tracker has found no face for a while).
        self.no_face_shown = False
        self._last_state = None
        self._freeze_pending = True  # gc.freeze() at the next new frame (see freeze_gc)
        self._last_preview_index = -1
        self._source_fps = (0, 0.0, 0.0)  # (frame index, time, fps)
        self.last_error: str | None = None
        self.neutral_landmarks = None  # Landmarks of the last neutral calibration
        self.reconstructor_factory = reconstructor_factory or engine_face_reconstructor
        self.speech_factory = speech_factory or engine_speech_animator
        self.camera_id = ""
        self.camera_index: int | None = None
        self.source_kind = ""
        self._reconnect_at = 0.0
        self._reconnecting = False
        self._reconnect_pending = False
        self._closing = False
        self._retired: list[tuple] = []  # replaced (pipeline, mic) pairs the opener has yet to stop
        # the GUI thread first: every other thread (and what it starts) runs at a lower priority,
        # except the audio opener's (audio callbacks must not be late); see ui/priority.py
        self.priorities = ThreadPriorities()
        self._opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="source-opener")
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="window-worker")
        self._audio_opener = self.priorities.kept_executor("audio-opener")
        self._sampler = None  # set by the calibration panel: f(state, pipeline) on the pipeline thread
        self.vmc = None  # outputs.VmcSender while the VMC output is on
        self.vcam = None  # outputs.VirtualCamera while the virtual camera is on
        self._vmc_key = None
        self.latency_history: deque = deque()
        self.fps_history: deque = deque()

        # -- persisted settings
        self.source_settings: store.SourceSettings = store.load_area(self.settings, store.SourceSettings)
        self.engine_choice: store.EngineChoice = store.load_area(self.settings, store.EngineChoice)
        self.expression_settings: store.ExpressionSettings = store.load_area(self.settings, store.ExpressionSettings)
        self.avatar_settings: store.AvatarSettings = store.load_area(self.settings, store.AvatarSettings)
        self.output_settings: store.OutputSettings = store.load_area(self.settings, store.OutputSettings)
        self.tuner = AvatarTuner(store.load_tuning(self.settings), ExpressionLayer())
        self._apply_custom_mix(self.expression_settings.custom, quiet=True)

        # -- engines
        self.engines = engines or EngineController(parent=self)
        self.engines.changed.connect(self._on_engine_changed)

        # -- viewport
        bg = self.avatar_settings.background
        self.viewport = AvatarViewportWidget(self, background=bg if isinstance(bg, str) else tuple(bg),
                                             msaa=self._effective_msaa(), lighting=self.avatar_settings.lighting)
        self.viewport.frame_presented.connect(self._on_frame_presented)
        self.viewport.frame_captured.connect(self._on_frame_captured)
        self.viewport.gl_failed.connect(self._show_error)
        self.setCentralWidget(self.viewport)
        self.setAcceptDrops(True)  # drop a video to play it, an avatar (.glb/.gltf/.vrm) to load it
        self._source_ready.connect(self._install_opened)
        self._avatar_loaded.connect(self._on_avatar_loaded)

        self._build_panels()
        self._build_actions()
        self._build_status_bar()
        self.resize(1440, 900)
        self._restore_layout()
        self._update_format_note()
        self._update_record_enabled()

        self.display_timer = QTimer(self)
        self.display_timer.setInterval(15)
        self.display_timer.timeout.connect(self._on_display_tick)
        self.display_timer.start()
        self.slow_timer = QTimer(self)
        self.slow_timer.setInterval(200)
        self.slow_timer.timeout.connect(self._on_slow_tick)
        self.slow_timer.start()

        choices = {k: dict(v) for k, v in self.engine_choice.choices.items()}
        self.engines.start(choices)
        self._apply_live_outputs()
        if self.avatar_settings.path:
            self.load_avatar(Path(self.avatar_settings.path), quiet=True)
        if source is not None:
            self.open_file(Path(source))
        elif camera is None and self.source_settings.kind == "file" and self.settings.value("last_file", "", type=str) \
                and Path(self.settings.value("last_file", "", type=str)).is_file():
            self.open_file(Path(self.settings.value("last_file", "", type=str)))
        else:
            idx = camera if camera is not None else self.settings.value("camera", 0, type=int)
            self.open_camera(idx)

    # ================================================================== construction
    def _build_panels(self) -> None:
        from avatar_app.ui.panels.avatar import AvatarPanel
        from avatar_app.ui.panels.calibration import CalibrationPanel
        from avatar_app.ui.panels.engines import EnginesPanel
        from avatar_app.ui.panels.expressions import ExpressionsPanel
        from avatar_app.ui.panels.latency import LatencyPanel
        from avatar_app.ui.panels.output import OutputPanel
        from avatar_app.ui.panels.sources import SourcesPanel
        from avatar_app.ui.panels.tracking import TrackingPanel

        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        self.sources_panel = SourcesPanel(self)
        self.engines_panel = EnginesPanel(self)
        self.calibration_panel = CalibrationPanel(self)
        self.tracking_panel = TrackingPanel(self)
        self.expressions_panel = ExpressionsPanel(self)
        self.avatar_panel = AvatarPanel(self)
        self.output_panel = OutputPanel(self)
        self.latency_panel = LatencyPanel(self)
        # names used by the first window and its tests
        self.preview = self.sources_panel.preview
        self.source_label = self.sources_panel.source_label
        self.mic_label = self.sources_panel.mic_label
        self.overlay_box = self.latency_panel.overlay_box

        self.docks: dict[str, QDockWidget] = {}
        left = Qt.DockWidgetArea.LeftDockWidgetArea
        right = Qt.DockWidgetArea.RightDockWidgetArea
        bottom = Qt.DockWidgetArea.BottomDockWidgetArea
        self.setCorner(Qt.Corner.BottomLeftCorner, left)
        self.setCorner(Qt.Corner.BottomRightCorner, right)
        self.panels = {"preview": self.sources_panel.preview_panel, "sources": self.sources_panel,
                       "engines": self.engines_panel, "calibration": self.calibration_panel,
                       "tracking": self.tracking_panel, "expressions": self.expressions_panel,
                       "avatar": self.avatar_panel, "output": self.output_panel, "latency": self.latency_panel}
        titles = {"preview": "Camera preview", "sources": "Sources", "engines": "Engines",
                  "calibration": "Calibration", "tracking": "Tracking", "expressions": "Expressions",
                  "avatar": "Avatar", "output": "Output", "latency": "Latency"}
        areas = {"preview": left, "sources": left, "engines": left, "calibration": left, "latency": bottom}
        for key, panel in self.panels.items():
            dock = QDockWidget(titles[key], self)
            dock.setObjectName(f"{key}_dock")
            dock.setWidget(panel if key in ("preview", "latency") else panel.scroll_wrapped())
            self.addDockWidget(areas.get(key, right), dock)
            self.docks[key] = dock
        for group in (("sources", "engines", "calibration"), ("tracking", "expressions", "avatar", "output")):
            for key in group[1:]:
                self.tabifyDockWidget(self.docks[group[0]], self.docks[key])
            self.docks[group[0]].raise_()
        self.resizeDocks([self.docks["sources"], self.docks["tracking"]], [350, 420], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["preview"], self.docks["sources"]], [300, 560], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["latency"]], [230], Qt.Orientation.Vertical)

    def _build_actions(self) -> None:
        def action(text, slot, shortcut=None, tip=""):
            a = QAction(text, self)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            a.setToolTip(tip or text)
            a.triggered.connect(lambda _checked=False, f=slot: f())
            self.addAction(a)  # shortcuts keep working with the menu bar hidden
            return a

        m = self.menuBar().addMenu("&File")
        m.addAction(action("&Open video…", self._on_open_dialog, QKeySequence.StandardKey.Open))
        m.addAction(action("Use &camera", lambda: self.open_camera(self.camera_index or self.settings.value(
            "camera", 0, type=int), wait=False)))
        m.addAction(action("Load &avatar…", self.avatar_panel.choose_file))
        m.addSeparator()
        self.record_action = action("&Record", self.recording.toggle_recording, "Ctrl+R")
        m.addAction(self.record_action)
        m.addAction(action("Choose recording &folder…", self.output_panel.choose_folder))
        m.addSeparator()
        m.addAction(action("&Quit", self.close, QKeySequence.StandardKey.Quit))
        t = self.menuBar().addMenu("&Tracking")
        self.neutral_action = action("Calibrate &neutral face", self.calibrate_neutral, "Ctrl+N",
                                     "Take your current face as the neutral face (look straight, relax)")
        t.addAction(self.neutral_action)
        v = self.menuBar().addMenu("&View")
        self.hide_panels_action = action("&Hide panels (clean capture view)", self.toggle_panels, "Ctrl+H")
        v.addAction(self.hide_panels_action)
        v.addSeparator()
        for dock in self.docks.values():
            v.addAction(dock.toggleViewAction())
        tb = QToolBar("Controls", self)
        tb.setObjectName("controls_toolbar")
        tb.setMovable(False)
        tb.addWidget(self.record_button)
        tb.addWidget(self.record_time_label)
        tb.addSeparator()
        tb.addAction(self.neutral_action)
        tb.addAction(self.hide_panels_action)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, tb)
        self.toolbar = tb

    def _build_status_bar(self) -> None:
        self.status = self.statusBar()
        self.status_labels: dict[str, QLabel] = {}
        for key, tip in (("engines", "Active backend and precision per engine"),
                         ("fps", "Frames processed per second"),
                         ("c2s", "Camera-to-screen latency, median over the last 5 s"),
                         ("dropped", "Camera frames dropped (newest frame wins)"),
                         ("face", "Whether the face tracker finds a face in the source"),
                         ("rec", "Recording time, and frames the recording dropped because the encoder "
                                 "could not keep up")):
            lab = QLabel("")
            lab.setToolTip(tip)
            self.status.addPermanentWidget(lab)
            self.status_labels[key] = lab
        self._update_engine_status()

    def _restore_layout(self) -> None:
        geo = self.settings.value("window/geometry")
        state = self.settings.value("window/state")
        if geo is not None:
            self.restoreGeometry(geo)
        if state is not None:
            self.restoreState(state)

    # ================================================================== menus
    def _on_open_dialog(self) -> None:
        start = self.settings.value("last_file", str(Path.home()), type=str)
        path, _ = QFileDialog.getOpenFileName(self, "Open a video", start,
                                              "Videos (*.mp4 *.mpg *.mov *.mkv *.webm *.avi);;All files (*)")
        if path:
            self.open_file(Path(path), wait=False)

    def toggle_panels(self, hide: bool | None = None) -> None:
        """Hide (or show again) every panel, the menu, toolbar and status bar: a clean capture view."""
        hide = self.panels_visible() if hide is None else hide
        if hide and not getattr(self, "_clean_view", False):  # hiding twice must not forget the panels
            self._visible_docks = [k for k, d in self.docks.items() if d.isVisible()]
            self._front_docks = self.front_tabs()
            self._dock_state = self.saveState()  # dock sizes and each tab group's front tab
            for d in self.docks.values():
                d.hide()
        elif not hide:
            state = getattr(self, "_dock_state", None)
            if state is not None:  # shows the docks as they were, sizes and front tabs included
                self.restoreState(state)
            for k in getattr(self, "_visible_docks", list(self.docks)):
                self.docks[k].show()
            for k in getattr(self, "_front_docks", []):  # shown again, a tab group fronts its first tab
                if self.docks[k].isVisible():
                    self.docks[k].raise_()
        self._clean_view = hide
        for w in (self.menuBar(), self.toolbar, self.status):
            w.setVisible(not hide)
        if hide:  # menus and toolbar are gone too: say how to get them back
            self.viewport.flash_hint("Press Ctrl+H to show panels", CLEAN_VIEW_HINT_MS)
        else:
            self.viewport.flash_hint(None)
        self._show_no_face(self.no_face_shown)

    def front_tabs(self) -> list[str]:
        """Keys of the docks in front of their tab group (one per group of tabbed docks)."""
        from PySide6.QtWidgets import QTabBar

        by_title = {d.windowTitle(): k for k, d in self.docks.items()}
        out = []
        for bar in self.findChildren(QTabBar):
            if bar.parent() is not self or bar.count() < 2 or not bar.isVisible() or bar.currentIndex() < 0:
                continue
            key = by_title.get(bar.tabText(bar.currentIndex()).replace("&", ""))
            if key is not None:
                out.append(key)
        return out

    def panels_visible(self) -> bool:
        """Whether any panel is shown."""
        return any(d.isVisible() for d in self.docks.values())

    # ================================================================== sources
    def _make_pipeline(self, source, ring):
        from avatar_app.fusion import FusionSettings
        from avatar_app.pipeline import LivePipeline

        # The engines come from the window's EngineController (so the Engines panel controls
        # them); until a slot is open the built-in solvers serve, never a second engine.
        recon = self.reconstructor_factory(self.engines)
        if recon is None:
            from avatar_app.reconstruction.geometric import GeometricSolver

            recon = GeometricSolver()
        kwargs = {}
        if ring is not None:
            speech = self.speech_factory(self.engines) if self.speech_factory is not None else None
            if speech is None:
                from avatar_app.speech.loudness import LoudnessSpeechAnimator

                speech = LoudnessSpeechAnimator()
            kwargs["speech"] = speech
        # smoothing is done per region by the tuner
        pipe = LivePipeline(source, ring=ring, reconstructor=recon,
                            fusion_settings=FusionSettings(smoothing=False), **kwargs)
        pipe.set_post_process(self.tuner)
        pipe.set_max_fps(self.effective_fps_cap())
        pipe.on_state = self._on_pipeline_state
        try:
            pipe.start()
        except AvatarError:
            if pipe.processor.tracker is not None:
                pipe.processor.tracker.close()
            raise
        return pipe

    def _open(self, make: Callable[[], _Opened], wait: bool, keep_old: bool = False, what: str = "") -> bool:
        """Open a source with ``make`` on the opener thread and install it.

        Args:
            make: builds the :class:`_Opened` (runs on the opener thread).
            wait: block until it is installed (True) or return once queued (False).
            keep_old: open the new source while the current one keeps running, and
                stop the current one only once the new one works (files: a wrong path
                or a broken file leaves what plays now playing). False stops the
                current source first (a camera cannot be opened twice).
            what: name of the source for the "Opening …" message.
        """
        self._reconnecting = False
        if keep_old:
            if wait:
                return self._install_opened(self._opener.submit(self._run_opener, make, None).result())
            self.status.showMessage(f"Opening {what or 'the source'}…", 5000)
            self._opener.submit(lambda: self._source_ready.emit(self._run_opener(make, None)))
            return True
        if wait:
            self.stop_pipeline()
            # opened on the opener thread all the same, so the threads it starts inherit its priority
            return self._install_opened(self._opener.submit(self._run_opener, make, None).result())
        old, old_mic = self.pipeline, self.mic
        self.pipeline, self.mic = None, None
        self.source_label.setText("Opening…")
        self._update_record_enabled()
        self._opener.submit(lambda: self._source_ready.emit(self._run_opener(make, (old, old_mic))))
        return True

    def _run_opener(self, make, old) -> _Opened:
        if old is not None:
            for obj in old:
                if obj is not None:
                    obj.stop()
        try:
            return make()
        except AvatarError as exc:
            return _Opened(error=str(exc))

    def _install_opened(self, res: _Opened) -> bool:
        if res.reconnect:
            self._reconnect_pending = False
            if not self._reconnecting:  # the user chose another source meanwhile
                if res.pipeline is not None:
                    res.pipeline.stop()
                if res.mic is not None:
                    res.mic.stop()
                return False
        if self._closing:
            if res.pipeline is not None:
                res.pipeline.stop()
            if res.mic is not None:
                res.mic.stop()
            return False
        if res.mic_text:
            self.mic_label.setText(res.mic_text)
        if res.error:
            if res.mic is not None:
                res.mic.stop()
            if not self._reconnecting:
                error = plain_error(res.error)
                if res.path is not None:  # the file's name first, then why (the full path is in the panel)
                    error = f"Could not play {res.path.name}: {plain_error(res.error, res.path)}"
                # no message box: the failure is shown where the source was chosen (the red text
                # under the file box, the preview caption) and in the status bar; nothing to decide
                self._show_status_error(error if self.pipeline is None
                                        else f"{error} The current source keeps running.")
                if self.pipeline is None:
                    self.source_label.setText(no_source_caption(error, res.kind))
                self.sources_panel.on_source_failed(res.path if res.kind == "file" else None, res.error)
                if res.kind == "file" and self.docks["sources"].isVisible():
                    self.docks["sources"].raise_()  # the red text under the file box says what failed
            self._update_record_enabled()
            return False
        old = (self.pipeline, self.mic)
        self.pipeline, self.mic = res.pipeline, res.mic
        if any(o is not None for o in old):  # the new source replaces one that kept running while it opened
            self._retired.append(old)
            self._opener.submit(self._stop_sources, old)
        self._freeze_pending = True
        self.tuner.reset()
        if res.reconnect and self.neutral_landmarks is not None:
            res.pipeline.processor.reconstructor.calibrate_neutral(self.neutral_landmarks)  # same user
        else:
            self.neutral_landmarks = None  # another source: calibrate again
        self.source_kind = res.kind
        self._reconnecting = False
        if res.kind == "camera":
            self.camera_id = res.camera_id
            self.source_settings.kind, self.source_settings.camera_id = "camera", res.camera_id
            self.settings.setValue("camera", self.camera_index)
        elif res.kind == "file" and res.path is not None:
            self.settings.setValue("last_file", str(res.path))
            self.source_settings.kind = "file"
        store.save_area(self.settings, self.source_settings)
        self.source_label.setText(res.label)
        self.status.showMessage(res.label, 5000)
        self.sources_panel.on_source_changed()
        self._update_record_enabled()
        self.priorities.sweep()
        return True

    def _stop_sources(self, objs) -> None:
        """Stop a replaced pipeline and microphone (on the opener thread: joining takes a moment)."""
        for obj in objs:
            if obj is not None:
                obj.stop()
        if objs in self._retired:
            self._retired.remove(objs)

    def open_file(self, path: Path, wait: bool = True) -> bool:
        """Play a video file live, looping (its audio drives speech).

        Args:
            path: the video.
            wait: open on this thread (True) or on the opener thread (False, from the panels).

        Returns:
            False (and shows why) when it cannot be opened; with ``wait=False`` True once queued.
        """
        from avatar_app.capture.live_file import LiveFileSource

        path = Path(path)

        def make() -> _Opened:
            try:
                source = LiveFileSource(path, loop=True)
                pipe = self._make_pipeline(source, getattr(source, "ring", None))
            except AvatarError as exc:
                return _Opened(error=str(exc), kind="file", path=path)
            w, h, fps = source.granted
            has_audio = pipe.ring is not None and bool(getattr(getattr(source, "info", None), "has_audio", True))
            return _Opened(pipe, None, f"File: {path.name} ({w}x{h} @ {fps:.0f} fps)",
                           "Audio: the file's own track" if has_audio
                           else "Audio: the file has no audio track (recording will be silent)",
                           kind="file", path=path)

        # the file is opened before the current source stops: a failure leaves it running
        return self._open(make, wait, keep_old=True, what=path.name)

    def open_camera(self, index: int, wait: bool = True, camera_id: str = "") -> bool:
        """Open camera ``index`` and the chosen microphone. Returns False and shows why on error.

        Args:
            index: OpenCV camera index.
            wait: open on this thread (True) or on the opener thread (False).
            camera_id: stable id of the device (for reconnecting), default "index:<index>".
        """
        from avatar_app.capture.camera import CameraSource
        from avatar_app.capture.ring import AudioRing

        self.camera_index = int(index)
        cam_id = camera_id or f"index:{index}"
        mic_name = self.source_settings.microphone

        def make() -> _Opened:
            ring = AudioRing(capacity_s=10.0, sample_rate=AUDIO_RATE)
            mic, mic_text = self._open_mic(ring, mic_name)
            if mic is None:
                ring = None
            try:
                source = CameraSource(index)
            except AvatarError as exc:
                if mic is not None:
                    mic.stop()
                return _Opened(error=str(exc), kind="camera", mic_text=mic_text)
            try:
                pipe = self._make_pipeline(source, ring)
            except AvatarError:
                if mic is not None:
                    mic.stop()
                raise
            granted = getattr(source, "granted", None)
            label = f"Camera {index}"
            if granted:
                label += f": {granted[0]}x{granted[1]} @ {granted[2]:.0f} fps granted"
            return _Opened(pipe, mic, label, mic_text, kind="camera", camera_id=cam_id)

        return self._open(make, wait)

    def _open_mic(self, ring, name: str):
        """Open and start microphone ``name`` on the audio opener (its threads keep the GUI's priority)."""
        from avatar_app.capture.mic import MicSource

        def work():
            with self.priorities.keeping_new_threads():
                mic = MicSource(device=name or None, ring=ring)
                mic.start()
            return mic

        try:
            return self._audio_opener.submit(work).result(), f"Microphone: {name or 'default input'}"
        except AvatarError as exc:
            log.warning("%s", exc)
            return None, f"Microphone: none. {_sentence(str(exc))} Speech is off; tracking continues."

    def set_microphone(self, name: str) -> bool:
        """Use microphone ``name`` ("" = default) with the camera; persisted. Returns False on error."""
        self.source_settings.microphone = name
        store.save_area(self.settings, self.source_settings)
        if self.pipeline is None or self.source_kind != "camera" or self.pipeline.ring is None:
            return True
        if self.mic is not None:
            self.mic.stop()
            self.mic = None
        self.mic, text = self._open_mic(self.pipeline.ring, name)
        self.mic_label.setText(text)
        return self.mic is not None

    def stop_pipeline(self) -> None:
        """Stop the current source, pipeline and microphone."""
        if self.pipeline is not None:
            self.pipeline.stop()
            self.pipeline = None
        if self.mic is not None:
            self.mic.stop()
            self.mic = None

    def calibrate_neutral(self) -> bool:
        """Use the current face as the neutral face (look straight, relax). Returns whether it worked."""
        pipe = self.pipeline
        lm = pipe.processor.last_landmarks if pipe is not None else None
        if lm is None:
            self.status.showMessage("No face to calibrate: look at the camera and try again", 5000)
            return False
        try:
            pipe.processor.reconstructor.calibrate_neutral(lm)
        except AvatarError as exc:
            self._show_error(str(exc))
            return False
        self.neutral_landmarks = lm
        self.status.showMessage("Neutral face calibrated", 3000)
        self.calibration_panel.on_neutral_captured()
        return True

    def _on_pipeline_state(self, state) -> None:
        """Pipeline thread: hand the frame to the calibration sampler when one runs."""
        sampler = self._sampler
        if sampler is not None:
            sampler(state, self.pipeline)
        vmc = self.vmc
        if vmc is not None:
            try:
                vmc.send(state)
            except AvatarError as exc:
                log.debug("VMC frame not sent: %s", exc)

    # ================================================================== settings
    def set_tuning(self, s: TuningSettings) -> None:
        """Apply and persist tracking settings (takes effect from the next frame).

        Raises:
            InputError: invalid settings.
        """
        self.tuner.set_settings(s)
        store.save_tuning(self.settings, s)

    def set_avatar_settings(self, a: store.AvatarSettings) -> None:
        """Apply and persist background, lighting and MSAA.

        Raises:
            InputError: an invalid value.
        """
        a = store.validate(a)
        self.avatar_settings = a
        self.viewport.set_render_settings(background=a.background, lighting=a.lighting, msaa=self._effective_msaa())
        store.save_area(self.settings, a)
        self._update_format_note()

    def set_output_settings(self, o: store.OutputSettings) -> None:
        """Apply and persist recording format, overlay, frame-rate cap and CPU budget mode."""
        o = store.validate(o)
        self.output_settings = o
        cap = self.effective_fps_cap()
        if self.pipeline is not None:
            self.pipeline.set_max_fps(cap)
        self.display_timer.setInterval(15 if not cap else max(15, int(1000 / cap / 2)))
        self.viewport.set_render_settings(msaa=self._effective_msaa())
        self._apply_live_outputs()
        store.save_area(self.settings, o)
        self._update_format_note()

    def _apply_live_outputs(self) -> None:
        """Open or close the VMC sender and the virtual camera as the Output settings say."""
        o = self.output_settings
        want = (o.vmc_host, o.vmc_port, o.vmc_names) if o.vmc_enabled else None
        if want != self._vmc_key:
            old, self.vmc, self._vmc_key = self.vmc, None, None
            if old is not None:
                old.close()
            text = "Off."
            if want is not None:
                try:
                    from avatar_app.outputs import VmcSender

                    self.vmc = VmcSender(o.vmc_host, o.vmc_port, name_style=o.vmc_names)
                    self._vmc_key = want
                    text = f"Sending to {o.vmc_host}:{o.vmc_port}."
                except (AvatarError, ImportError) as exc:
                    text = f"Not sending: {exc}"
            self.output_panel.vmc_status.setText(text)
        if o.virtual_camera and self.vcam is None:
            try:
                from avatar_app.outputs import VirtualCamera

                bg = self.avatar_settings.background
                self.vcam = VirtualCamera(*RECORD_SIZE, RECORD_FPS,
                                          background=tuple(bg) if isinstance(bg, list) else (0, 177, 64))
                self.output_panel.vcam_status.setText(f"Sending to {self.vcam.device}.")
            except (AvatarError, ImportError) as exc:
                self.output_panel.vcam_status.setText(f"Not available: {exc}")
        elif not o.virtual_camera and self.vcam is not None:
            vcam, self.vcam = self.vcam, None
            vcam.close()
        self._update_capture()

    def _update_capture(self) -> None:
        """Render 1280x720 frames on the render thread while recording or feeding the virtual camera."""
        self.viewport.capture_size = RECORD_SIZE
        if self.recorder is None:
            self.viewport.capture_components = 3
        self.viewport.capture_frames = self.recorder is not None or self.vcam is not None

    def effective_fps_cap(self) -> float:
        """The processing cap in Hz: the lower of the user's cap and the CPU mode's (0 = none)."""
        caps = [c for c in (self.output_settings.fps_cap, store.CPU_MODES[self.output_settings.cpu_mode][0]) if c > 0]
        return float(min(caps)) if caps else 0.0

    def _effective_msaa(self) -> int:
        return self.avatar_settings.msaa if store.CPU_MODES[self.output_settings.cpu_mode][1] else 0

    def set_expression_settings(self, e: store.ExpressionSettings) -> None:
        """Apply and persist hotkeys, modes and the custom mix."""
        self.expression_settings = store.validate(e)
        self._apply_custom_mix(e.custom)
        store.save_area(self.settings, self.expression_settings)

    def _apply_custom_mix(self, text: str, quiet: bool = False) -> str:
        try:
            self.tuner.expressions.set_mix("custom", parse_mix(text))
            return ""
        except AvatarError as exc:
            if not quiet:
                self.status.showMessage(f"Custom expression: {exc}", 8000)
            return str(exc)

    def set_engine_choice(self, name: str, backend: str, precision: str | None):
        """Switch engine ``name`` (built and verified in the background; persisted). Returns the Future."""
        self.engine_choice.choices[name] = {"backend": backend, "precision": precision}
        store.save_area(self.settings, self.engine_choice)
        return self.engines.request(name, backend, precision)

    def save_settings(self) -> None:
        """Write every area and the window layout."""
        store.save_area(self.settings, self.source_settings)
        store.save_area(self.settings, self.engine_choice)
        store.save_area(self.settings, self.expression_settings)
        store.save_area(self.settings, self.avatar_settings)
        store.save_area(self.settings, self.output_settings)
        store.save_tuning(self.settings, self.tuner.settings)
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.settings.sync()

    # ================================================================== avatar
    def load_avatar(self, path: Path, quiet: bool = False) -> bool:
        """Load a glTF/VRM avatar in the background (avatar_app.avatar.loader); False if no loader exists."""
        try:
            from avatar_app.avatar.loader import load_avatar
        except ImportError:
            if not quiet:
                self._show_error("Loading avatars needs avatar_app.avatar.loader, which this version lacks.")
            return False
        path = Path(path)

        def work():
            try:
                self._avatar_loaded.emit(path, load_avatar(path))
            except AvatarError as exc:
                self._avatar_loaded.emit(path, exc)

        self._worker.submit(work)
        return True

    def _on_avatar_loaded(self, path: Path, mesh) -> None:
        if isinstance(mesh, BaseException):
            self._show_error(str(mesh))
            return
        self.viewport.set_avatar(mesh)
        self._freeze_pending = True
        self.avatar_settings.path = str(path)
        store.save_area(self.settings, self.avatar_settings)
        self.avatar_panel.on_avatar_loaded(path, mesh)

    # ================================================================== timers
    @staticmethod
    def freeze_gc() -> None:
        """Move every object alive now out of the cyclic garbage collector's view (``gc.freeze``).

        After start-up the process holds ~180 000 tracked objects (Qt wrappers,
        MediaPipe, ONNX Runtime, numpy); a full collection then took 170 ms on
        whichever thread triggered it, often the GUI thread. Frozen objects are
        skipped, so collections only scan what is newer (measured: 0.05 ms). Called
        once the first frame shows and after each source, engine or avatar change;
        cyclic garbage that already existed then is kept (a few objects).
        """
        gc.freeze()

    def _on_display_tick(self) -> None:
        pipe = self.pipeline
        if pipe is None:
            return
        state = pipe.latest_state()
        if state is not None and state is not self._last_state:
            if self._last_state is None or self._freeze_pending:
                self._freeze_pending = False
                self.freeze_gc()
            self._last_state = state
            self.viewport.show_state(state)
        if pipe.error and pipe.error != self.last_error:
            if not pipe.running:  # the source died: a recording of it ends here, kept and playable
                what = "the camera was lost" if self.source_kind == "camera" else "the source failed"
                self.recording.stop_because(f"{what} ({plain_error(pipe.error)})")
                self.source_label.setText(f"Stopped: {plain_error(pipe.error)}")
                self._update_record_enabled()
            if self.source_kind == "camera" and not pipe.running:
                self.last_error = pipe.error
                self.status.showMessage(f"Camera lost ({plain_error(pipe.error)}); waiting for it to return…")
                self._reconnect_at = time.monotonic() + 1.0
                self._reconnecting = True
            else:
                self._show_error(plain_error(pipe.error))
                self.last_error = pipe.error

    def _on_frame_presented(self, state, t_ns: int) -> None:
        pipe = self.pipeline
        if pipe is not None and state is not None and state.stamps:
            pipe.presented(state, t_ns)
            durations = {k: (e - s) / 1e6 for k, (s, e) in state.stamps.items()}
            self.latency_history.append((t_ns / 1e9, durations, (t_ns - state.t_capture_ns) / 1e6))
            cutoff = t_ns / 1e9 - PLOT_WINDOW_S
            while self.latency_history and self.latency_history[0][0] < cutoff:
                self.latency_history.popleft()

    def _on_slow_tick(self) -> None:
        self.priorities.sweep()  # threads started since (decoder, engine pools, encoder)
        pipe = self.pipeline
        if self._reconnecting and time.monotonic() >= self._reconnect_at:
            self._try_reconnect()
        self.recording.update_status()  # the recording timer runs whatever the source does
        self._update_record_enabled()
        self._update_no_face(pipe)
        if pipe is None:
            self.viewport.set_overlay_lines(None)
            return
        summary = pipe.stats.summary()
        self.viewport.set_overlay_lines(summary.lines() if self.overlay_box.isChecked() else None)
        now = time.perf_counter()
        self.fps_history.append((now, summary.fps, summary.dropped))
        while self.fps_history and self.fps_history[0][0] < now - PLOT_WINDOW_S:
            self.fps_history.popleft()
        if store.CPU_MODES[self.output_settings.cpu_mode][2]:
            self._update_preview()
        self._measure_source_fps()
        c2s = f"{summary.camera_to_screen[0]:.0f} ms" if summary.camera_to_screen else "–"
        self.status_labels["fps"].setText(f"{summary.fps:4.1f} fps" if pipe.running else "stopped")
        self.status_labels["c2s"].setText(f"camera-to-screen {c2s}")
        self.status_labels["dropped"].setText(f"dropped {summary.dropped}")
        self.sources_panel.on_tick()

    def _update_no_face(self, pipe) -> None:
        """Show "No face found" while the source runs and the tracker has found no face for NO_FACE_DELAY_S."""
        st = self._last_state if pipe is not None and pipe.running else None
        if st is None or st.face_found:
            self._no_face_since = None
            self._show_no_face(False)
            return
        now = time.monotonic()
        if self._no_face_since is None:
            self._no_face_since = now
        self._show_no_face(now - self._no_face_since >= NO_FACE_DELAY_S)

    def _show_no_face(self, on: bool) -> None:
        """Status bar label always; the viewport notice only with the panels shown (never on a clean capture)."""
        self.no_face_shown = on
        self.status_labels["face"].setText("No face found" if on else "")
        self.status_labels["face"].setStyleSheet("color: #c0392b; font-weight: bold;" if on else "")
        self.viewport.set_notice("No face found: face the camera, or play a video with a face in it"
                                 if on and self.panels_visible() else None)

    def _measure_source_fps(self) -> None:
        frame = self.pipeline.last_frame if self.pipeline is not None else None
        if frame is None:
            return
        idx0, t0, fps = self._source_fps
        now = time.monotonic()
        if now - t0 >= 2.0:
            if frame.index > idx0 and t0 > 0:
                fps = (frame.index - idx0) / (now - t0)
            self._source_fps = (frame.index, now, fps)

    @property
    def source_fps(self) -> float:
        """Frame rate the source really delivers (frame indices per second over ~2 s)."""
        return self._source_fps[2]

    def _try_reconnect(self) -> None:
        """Look for the lost camera by its device id (on the opener thread) and reopen it."""
        from avatar_app.ui.devices import resolve_camera_id

        self._reconnect_at = time.monotonic() + 2.0
        if self._reconnect_pending:
            return
        self._reconnect_pending = True
        cam_id = self.camera_id or f"index:{self.camera_index or 0}"

        def make() -> _Opened:
            index = resolve_camera_id(cam_id, None)
            if index is None:
                return _Opened(error=f"camera {cam_id} is not connected", kind="camera")
            self.camera_index = index
            return self._camera_opened(index, cam_id)

        def job():
            res = self._run_opener(make, None)
            res.reconnect = True
            self._source_ready.emit(res)

        self._opener.submit(job)

    def _camera_opened(self, index: int, cam_id: str) -> _Opened:
        """Open camera ``index`` on the opener thread (used by reconnect)."""
        from avatar_app.capture.camera import CameraSource
        from avatar_app.capture.ring import AudioRing

        ring = AudioRing(capacity_s=10.0, sample_rate=AUDIO_RATE)
        mic, mic_text = self._open_mic(ring, self.source_settings.microphone)
        try:
            source = CameraSource(index, open_timeout_s=2.0)
            pipe = self._make_pipeline(source, ring if mic is not None else None)
        except AvatarError as exc:
            if mic is not None:
                mic.stop()
            return _Opened(error=str(exc), kind="camera")
        g = source.granted
        return _Opened(pipe, mic, f"Camera {index} (reconnected): {g[0]}x{g[1]} @ {g[2]:.0f} fps granted",
                       mic_text, kind="camera", camera_id=cam_id)

    def _update_preview(self) -> None:
        import cv2

        pipe = self.pipeline
        frame = pipe.last_frame if pipe is not None else None
        if frame is None or frame.index == self._last_preview_index or not self.preview.isVisible():
            return
        self._last_preview_index = frame.index
        img = frame.image
        h, w = img.shape[:2]
        box_w, box_h = self.preview.width(), self.preview.height()
        scale = min(box_w / w, box_h / h)
        small = cv2.resize(img, (max(1, int(w * scale)), max(1, int(h * scale))), interpolation=cv2.INTER_AREA)
        lm = pipe.processor.last_landmarks
        if lm is not None:
            pts = (lm.points[:, :2] * np.array([small.shape[1], small.shape[0]])).astype(np.int32)
            pts[:, 0] = np.clip(pts[:, 0], 0, small.shape[1] - 1)
            pts[:, 1] = np.clip(pts[:, 1], 0, small.shape[0] - 1)
            small[pts[::2, 1], pts[::2, 0]] = (0, 255, 0)
        if self.tuner.settings.mirror:
            small = small[:, ::-1]  # the preview shows you as a mirror does, like the avatar
        rgb = np.ascontiguousarray(cv2.cvtColor(small, cv2.COLOR_BGR2RGB))
        qimg = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888).copy()
        self.preview.setPixmap(QPixmap.fromImage(qimg))

    # ================================================================== engines
    def _on_engine_changed(self, name: str) -> None:
        self._update_engine_status()
        self.engines_panel.refresh(name)
        self._attach_engines()
        self._freeze_pending = True

    def _attach_engines(self) -> None:
        """Give the running pipeline an engine whose slot has just opened (swapped between two frames).

        The wrapper (EngineReconstructor / EngineSpeechAnimator) is built on the
        window's worker thread and assigned to the pipeline's processor there: the
        processing thread reads it once per frame. The slot object stays the same
        across backend/precision switches, so this happens once per pipeline and
        engine; the neutral face is carried over.
        """
        pipe = self.pipeline
        if pipe is None:
            return
        speech_slot = self.engines.slot("speech2face")
        face_slot = self.engines.slot("face_recon")
        want_speech = (speech_slot is not None and pipe.ring is not None
                       and getattr(pipe.processor.speech, "slot", None) is not speech_slot)
        want_face = face_slot is not None and getattr(pipe.processor.reconstructor, "slot", None) is not face_slot
        if not (want_speech or want_face):
            return
        neutral = self.neutral_landmarks

        def work() -> None:
            if self.pipeline is not pipe:
                return
            if want_speech:
                try:
                    speech = self.speech_factory(self.engines)
                    if speech is not None:
                        pipe.processor.speech = speech
                except AvatarError as exc:
                    log.warning("speech engine not attached: %s", exc)
            if want_face:
                try:
                    recon = self.reconstructor_factory(self.engines)
                    if recon is not None:
                        if neutral is not None:
                            recon.calibrate_neutral(neutral)
                        pipe.processor.reconstructor = recon
                except AvatarError as exc:
                    log.warning("face reconstruction engine not attached: %s", exc)

        self._worker.submit(work)

    def _update_engine_status(self) -> None:
        short = {"face_recon": "Face", "speech2face": "Speech"}
        parts = [f"{short.get(n, n)}: {self.engines.describe(n)}" for n in self.engines.entries]
        self.status_labels["engines"].setText("   ".join(parts))

    # ================================================================== recording (ui/recording.py)
    # The window's recording names, kept for the panels and tests: each forwards to self.recording.
    record_button = property(lambda self: self.recording.record_button, doc="The toolbar's Record/Stop button.")
    record_time_label = property(lambda self: self.recording.record_time_label, doc="The toolbar's REC timer.")
    audio_timer = property(lambda self: self.recording.audio_timer, doc="10 Hz timer feeding audio to the clip.")
    recorder = property(lambda self: self.recording.recorder, doc="The running recorder, or None.")
    record_path = property(lambda self: self.recording.record_path, doc="The running (or last) clip, or None.")
    sidecar = property(lambda self: self.recording.sidecar, doc="The running blendshape track writer, or None.")
    sidecar_path = property(lambda self: self.recording.sidecar_path, doc="The blendshape track beside the clip.")
    last_record_message = property(lambda self: self.recording.last_record_message,
                                   doc='The last finished recording\'s message ("Saved …" or what went wrong).')
    record_drop_warning = property(lambda self: self.recording.record_drop_warning,
                                   doc='The last "encoder cannot keep up" warning ("" if none).')

    def record_folder(self) -> Path:
        """Folder recordings go to (see :meth:`RecordingController.record_folder`)."""
        return self.recording.record_folder()

    def set_record_folder(self, folder: Path) -> None:
        """Persist the recording folder (see :meth:`RecordingController.set_record_folder`)."""
        self.recording.set_record_folder(folder)

    def record_blocker(self) -> str:
        """Why a recording cannot start now; "" when it can (see :meth:`RecordingController.record_blocker`)."""
        return self.recording.record_blocker()

    def recording_format(self):
        """(RecordingFormat, note) of the next recording (see :meth:`RecordingController.recording_format`)."""
        return self.recording.recording_format()

    def record_fps(self) -> float:
        """Frame rate of the next recording, Hz (see :meth:`RecordingController.record_fps`)."""
        return self.recording.record_fps()

    def recording_dropped(self) -> int:
        """Frames the running recording lost (see :meth:`RecordingController.recording_dropped`)."""
        return self.recording.recording_dropped()

    def recording_drop_message(self, dropped: int, fmt=None, encoder: bool = True) -> str:
        """The dropped-frames warning (see :meth:`RecordingController.recording_drop_message`)."""
        return self.recording.recording_drop_message(dropped, fmt, encoder)

    def start_recording(self, path: Path | None = None) -> Path | None:
        """Start recording; returns the clip or None (see :meth:`RecordingController.start_recording`)."""
        return self.recording.start_recording(path)

    def stop_recording(self, wait: bool = True) -> None:
        """Stop and finalise the recording (see :meth:`RecordingController.stop_recording`)."""
        self.recording.stop_recording(wait)

    def _on_recording_closed(self, path, error, info=None) -> None:
        self.recording._on_recording_closed(path, error, info)

    def _update_record_enabled(self) -> None:
        self.recording.update_enabled()

    def _update_format_note(self) -> None:
        self.recording.update_format_note()

    def _on_frame_captured(self, rgb, t_ns: int) -> None:
        """A 1280x720 render for the virtual camera and the recording (GUI thread, queued).

        ``t_ns`` is when the frame was shown; the recording places it at the capture
        time of the camera frame it shows (``viewport.captured_state``).
        """
        vcam = self.vcam
        if vcam is not None:
            try:
                vcam.send(rgb)
            except AvatarError as exc:
                log.warning("virtual camera stopped: %s", exc)
                self.vcam = None
                vcam.close()
                self._update_capture()
        self.recording.on_frame_captured(rgb, t_ns)

    # ================================================================== drag and drop
    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if any(self._drop_kind(Path(u.toLocalFile())) for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        for u in event.mimeData().urls():
            path = Path(u.toLocalFile())
            kind = self._drop_kind(path)
            if kind == "avatar":
                self.load_avatar(path)
            elif kind == "video":
                self.open_file(path, wait=False)
            if kind:
                event.acceptProposedAction()
                return

    @staticmethod
    def _drop_kind(path: Path) -> str:
        """"avatar" (.glb .gltf .vrm), "video" (.mp4 .mpg .mov .mkv .webm .avi) or ""."""
        suffix = path.suffix.lower()
        if suffix in (".glb", ".gltf", ".vrm"):
            return "avatar"
        if suffix in (".mp4", ".mpg", ".mpeg", ".mov", ".mkv", ".webm", ".avi"):
            return "video"
        return ""

    # ================================================================== keys (expressions)
    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not event.isAutoRepeat() and self.expressions_panel.handle_key(event, pressed=True):
            event.accept()
            return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not event.isAutoRepeat() and self.expressions_panel.handle_key(event, pressed=False):
            event.accept()
            return
        super().keyReleaseEvent(event)

    # ================================================================== errors, close
    def _show_status_error(self, message: str) -> None:
        """Say what went wrong in the status bar only (no message box): for failures the user
        sees in place as well and needs to decide nothing about (a source that did not open)."""
        self.last_error = message
        log.warning("%s", message)
        self.status.showMessage(message, 15000)

    def _show_error(self, message: str) -> None:
        """Show a non-blocking message; the window stays usable."""
        self._show_status_error(message)
        if os.environ.get("AVATAR_APP_SCREENSHOT"):
            return  # unattended screenshot run: no message boxes over the window
        box = QMessageBox(QMessageBox.Icon.Warning, "avatar_app", message, QMessageBox.StandardButton.Ok, self)
        box.setModal(False)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        self._error_box = box

    def _show_info(self, message: str) -> None:
        """Show a non-blocking information message (selectable text, e.g. a folder path)."""
        self.last_info = message
        log.info("%s", message)
        self.status.showMessage(message, 15000)
        if os.environ.get("AVATAR_APP_SCREENSHOT"):
            return
        box = QMessageBox(QMessageBox.Icon.Information, "avatar_app", message, QMessageBox.StandardButton.Ok, self)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.setModal(False)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        self._info_box = box

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._closing = True
        self.save_settings()
        self.stop_recording()
        for t in (self.display_timer, self.slow_timer, self.audio_timer):
            t.stop()
        for p in self.panels.values():
            if hasattr(p, "shutdown"):
                p.shutdown()
        self._opener.shutdown(wait=True, cancel_futures=True)
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._audio_opener.shutdown(wait=True, cancel_futures=True)
        for objs in list(self._retired):  # their stop was cancelled with the opener's queue
            self._stop_sources(objs)
        self.stop_pipeline()
        for out in (self.vmc, self.vcam):
            if out is not None:
                out.close()
        self.vmc = self.vcam = None
        self.viewport.shutdown()
        self.engines.close()
        super().closeEvent(event)


__all__ = ["MainWindow", "engine_face_reconstructor", "engine_speech_animator", "RECORD_SIZE", "RECORD_FPS"]
