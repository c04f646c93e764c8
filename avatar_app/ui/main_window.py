"""The studio window: avatar viewport with dockable panels, latency plots, status bar, shortcuts.

Layout: the viewport in the centre; Sources (camera, microphone, file, camera
preview) on the left; Engines, Calibration, Tracking, Expressions, Avatar and
Output tabbed on the right; latency plots at the bottom; a toolbar with the
record button. Every dock can be moved, floated or closed (View menu);
Ctrl+H hides them all for a clean capture view. Window layout and every
panel's settings persist in QSettings and are restored on the next start.

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
from PySide6.QtCore import QSettings, QStandardPaths, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QImage, QKeySequence, QPixmap
from PySide6.QtWidgets import (QDockWidget, QFileDialog, QLabel, QMainWindow, QMessageBox, QPushButton,
                               QToolBar)

# imported here, on the GUI thread, before any worker starts: the device-listing and opener threads
# importing the package at the same time could see it half initialised (circular-import error)
import avatar_app.capture  # noqa: F401,E402
from avatar_app.core.clock import now_ns
from avatar_app.core.errors import AvatarError
from avatar_app.ui import settings as store
from avatar_app.ui.engines import EngineController
from avatar_app.ui.panels import plain_error
from avatar_app.ui.priority import ThreadPriorities
from avatar_app.ui.tuning import AvatarTuner, ExpressionLayer, TuningSettings, parse_mix
from avatar_app.ui.viewport import AvatarViewportWidget

log = logging.getLogger(__name__)

RECORD_SIZE = (1280, 720)
#: Frame rate of window recordings, Hz; a lower frame-rate cap lowers it (see MainWindow.record_fps).
RECORD_FPS = 30.0
#: Alpha formats for live recording from the window, fastest first. Measured at 1280x720 on the
#: 2-core development machine (encoder only, 2 threads, moving avatar frames): VP9 realtime
#: (libvpx-vp9, cpu-used 8, row-mt) 9 ms CPU a frame; ProRes 4444 prores_aw 12 ms; prores_ks 66-82 ms;
#: each plus ~12 ms of alpha preparation (record/alpha.py straight_alpha_frame). The CLI renders
#: offline and keeps record.formats' order (ProRes 4444 first).
LIVE_ALPHA_ORDER = ("vp9-webm", "prores4444-mov", "prores4444ks-mov")
#: Shortest time between two "encoder cannot keep up" warnings in the status bar, s.
DROP_WARNING_INTERVAL_S = 5.0
AUDIO_RATE = 16000
#: Seconds of per-frame latency history the plots show.
PLOT_WINDOW_S = 30.0
#: Seconds without a face before "No face found" shows (a blink or a turn of the head is not reported).
NO_FACE_DELAY_S = 0.6
#: How long the "Press Ctrl+H to show panels" hint stays on the clean capture view, ms.
CLEAN_VIEW_HINT_MS = 3000
NO_SOURCE_TO_RECORD = ("Nothing to record: no camera or video is running. Open a video (File › Open video…) "
                       "or choose a camera in Sources, then record.")


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
    _recording_closed = Signal(object, object, object)
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
        self.recorder = None
        self.record_path: Path | None = None
        self.sidecar = None  # record.SidecarWriter of the running recording
        self.sidecar_path: Path | None = None
        self._sidecar_t0_ns: int | None = None
        self._sidecar_last_t_ns = 0
        self._record_stop_reason = ""
        #: The last message of a recording that finished ("Saved …" or what went wrong).
        self.last_record_message = ""
        #: The last information message shown with :meth:`_show_info`.
        self.last_info: str | None = None
        self._no_face_since: float | None = None
        #: Whether "No face found" is shown (the source runs, the tracker has found no face for a while).
        self.no_face_shown = False
        self._rec_t0_ns = 0
        self._rec_audio_end_ns = 0
        self._rec_fps = RECORD_FPS
        self._rec_format = None
        self._rec_skip0 = 0  # viewport.captures_skipped when the recording started
        self._rec_drops_warned = (0, 0.0, False)  # (drops, monotonic time, encoder behind) of the last warning
        #: The last "encoder cannot keep up" warning of the running or last recording ("" if none).
        self.record_drop_warning = ""
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
        self._recording_closed.connect(self._on_recording_closed)
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
        self.audio_timer = QTimer(self)
        self.audio_timer.setInterval(100)
        self.audio_timer.timeout.connect(self._on_audio_tick)

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

        self.record_button = QPushButton("● Record")
        self.record_button.setCheckable(True)
        self.record_button.setToolTip("Record the avatar with your voice (Ctrl+R)")
        self.record_button.toggled.connect(self._on_record_toggled)
        self.record_time_label = QLabel("")
        m = self.menuBar().addMenu("&File")
        m.addAction(action("&Open video…", self._on_open_dialog, QKeySequence.StandardKey.Open))
        m.addAction(action("Use &camera", lambda: self.open_camera(self.camera_index or self.settings.value(
            "camera", 0, type=int), wait=False)))
        m.addAction(action("Load &avatar…", self.avatar_panel.choose_file))
        m.addSeparator()
        self.record_action = action("&Record", self._on_record_shortcut, "Ctrl+R")
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
                self._stop_recording_because(f"{what} ({plain_error(pipe.error)})")
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
        # the recording timer runs whatever the source does
        rec = f"● REC {(now_ns() - self._rec_t0_ns) / 1e9:6.1f} s" if self.recorder is not None else ""
        dropped = self.recording_dropped()
        if rec and dropped:
            rec += f" · recording dropped {dropped}"
            self._warn_recording_drops(dropped)
        for lab in (self.status_labels["rec"], self.record_time_label):
            lab.setStyleSheet("color: #c0392b;" if rec and dropped else "")
        self.status_labels["rec"].setText(rec)
        self.record_time_label.setText(f"  {rec}" if rec else "")
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

    # ================================================================== recording
    def record_folder(self) -> Path:
        """Folder recordings go to (persisted; default: the user's Videos folder / avatar_app)."""
        default = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.MoviesLocation) or str(Path.home())
        return Path(self.settings.value("record_folder", str(Path(default) / "avatar_app"), type=str))

    def set_record_folder(self, folder: Path) -> None:
        """Persist the recording folder."""
        self.settings.setValue("record_folder", str(folder))

    def _on_record_toggled(self, on: bool) -> None:
        if on:
            self.start_recording()
        else:
            self.stop_recording(wait=False)  # the file is finished on a worker; "Saved" follows

    def _on_record_shortcut(self) -> None:
        """Ctrl+R / File › Record: stop a running recording, else start one (or say why not)."""
        if self.recorder is not None:
            self.stop_recording(wait=False)
        else:
            self.start_recording()

    def record_blocker(self) -> str:
        """Why a recording cannot start now, as the user should read it; "" when it can."""
        pipe = self.pipeline
        if pipe is None:
            return NO_SOURCE_TO_RECORD
        if not pipe.running:
            why = f" ({plain_error(pipe.error)})" if pipe.error else ""
            return f"Nothing to record: the source stopped{why}. Open a video or choose a camera in Sources."
        return ""

    def _update_record_enabled(self) -> None:
        """Enable the record button only while a source runs (or a recording is on); the tooltip says why not."""
        why = self.record_blocker() if self.recorder is None else ""
        self.record_button.setEnabled(not why)
        self.record_button.setToolTip(why or ("Stop recording and save the clip (Ctrl+R)" if self.recorder is not None
                                              else "Record the avatar with your voice (Ctrl+R)"))

    def recording_format(self):
        """The format the next recording uses, and a note when it is not the Output panel's choice.

        With a transparent background and a format without alpha (H.264, MPEG-4) the
        recording switches to the preferred available alpha format (ProRes 4444 .mov,
        else VP9 .webm; record.formats.choose_alpha_format) so the transparency is kept,
        as the CLI requires an alpha format for ``--background transparent``.

        Returns:
            (RecordingFormat, note): note is "" when the chosen format is used as is.
        """
        from avatar_app.core.errors import RecordingError
        from avatar_app.record.formats import choose_alpha_format, format_by_key

        try:
            fmt = format_by_key(self.output_settings.format)
        except AvatarError:
            fmt = format_by_key("h264-mp4")
        if self.avatar_settings.background != "transparent" or fmt.alpha:
            return fmt, ""
        try:
            alpha = self._live_alpha_format() or choose_alpha_format()
        except RecordingError:
            return fmt, (f"Transparent background, but this FFmpeg build has no encoder that keeps alpha: "
                         f"{fmt.label} recordings get a black background. Pick a colour background for recording.")
        return alpha, (f"Transparent background: recordings are saved as {alpha.label} to keep it; "
                       f"{fmt.label} cannot store transparency.")

    @staticmethod
    def _live_alpha_format():
        """The first available format of LIVE_ALPHA_ORDER (the fastest alpha encoder), or None."""
        from avatar_app.record.formats import available_formats

        have = {f.key: f for f in available_formats(alpha=True)}
        return next((have[k] for k in LIVE_ALPHA_ORDER if k in have), None)

    def record_fps(self) -> float:
        """Frame rate of the next recording, Hz: RECORD_FPS, or the frame-rate cap when lower.

        The recording has a constant frame rate (record/synced.py repeats frames to
        fill it), so the encoder's work follows this rate, not the source's: a lower
        cap (Output › Performance) is what lets a slow encoder keep up.
        """
        cap = self.effective_fps_cap()
        return float(min(RECORD_FPS, cap)) if cap > 0 else RECORD_FPS

    def recording_dropped(self) -> int:
        """Frames of the running recording lost so far (0 without a recording).

        Counts frames the encoder queue refused (``AsyncRecorder.dropped_queue_full``:
        the encoder was behind) plus states the viewport replaced before rendering them
        for the recording (``AvatarViewportWidget.captures_skipped``). Frames repeated
        on purpose (same capture time) are not counted.
        """
        return sum(self._recording_drop_counts())

    def _recording_drop_counts(self) -> tuple[int, int]:
        """(frames the encoder queue refused, states the viewport skipped) of the running recording."""
        rec = self.recorder
        if rec is None:
            return 0, 0
        full = getattr(rec, "dropped_queue_full", None)
        if full is None:  # an older AsyncRecorder: its total
            full = getattr(rec, "dropped_frames", 0)
        return int(full), max(0, self.viewport.captures_skipped - self._rec_skip0)

    def recording_drop_message(self, dropped: int, fmt=None, encoder: bool = True) -> str:
        """The warning for a recording that dropped ``dropped`` frames, with what to do about it.

        Args:
            dropped: frames lost.
            fmt: the RecordingFormat recorded (default: the running recording's).
            encoder: the encoder was behind (else only the rendering for the recording was).
        """
        fmt = fmt or self._rec_format
        advice = []
        if fmt is not None and fmt.video_codec.startswith("prores"):
            vp9 = next((f for f in self._available_alpha() if f.key == "vp9-webm"), None)
            if vp9 is not None:
                advice.append("use VP9 (.webm) in Output › Format")
        advice.append("set a lower frame-rate cap in Output › Performance")
        advice.append("close other programs")
        s = "" if dropped == 1 else "s"
        who = "The encoder" if encoder else "Rendering for the recording"
        return (f"{who} cannot keep up: {dropped} frame{s} dropped — "
                f"{', '.join(advice[:-1])} or {advice[-1]}.")

    @staticmethod
    def _available_alpha():
        from avatar_app.record.formats import available_formats

        return available_formats(alpha=True)

    def _warn_recording_drops(self, dropped: int) -> None:
        """Status-bar warning when the running recording drops frames (at most every DROP_WARNING_INTERVAL_S)."""
        last, t_last, was_encoder = self._rec_drops_warned
        now = time.monotonic()
        encoder = self._recording_drop_counts()[0] > 0
        if dropped > last and (last == 0 or now - t_last >= DROP_WARNING_INTERVAL_S or encoder != was_encoder):
            self._rec_drops_warned = (dropped, now, encoder)
            self.record_drop_warning = self.recording_drop_message(dropped, encoder=encoder)
            log.warning("%s", self.record_drop_warning)
            self.status.showMessage(self.record_drop_warning, 10000)

    def _update_format_note(self) -> None:
        """Show in the Output panel which format the recording will really use."""
        _, note = self.recording_format()
        self.output_panel.set_format_note(note)

    def _reset_record_button(self) -> None:
        self.record_button.blockSignals(True)
        self.record_button.setChecked(False)
        self.record_button.blockSignals(False)
        self.record_button.setText("● Record")

    def start_recording(self, path: Path | None = None) -> Path | None:
        """Start recording the avatar (1280x720, 30 fps) with the source's audio. Returns the path.

        The format is the Output panel's; formats that keep transparency record RGBA.
        Sync is the CLI's (record/synced.py): the file is built by a
        :class:`~avatar_app.record.SyncedRecorder` with the audio sample clock as the
        master; each rendered frame is placed at the capture time of the camera frame
        it shows (``AvatarState.t_capture_ns``), the audio at the capture time of its
        samples, both on the process clock (``now_ns``). So the avatar's lips meet the
        voice whatever the camera-to-screen latency, and the clip does not drift.
        """
        from avatar_app.record import AsyncRecorder, SyncedRecorder
        from avatar_app.record.formats import open_recorder

        if self.recorder is not None:
            return None
        why = self.record_blocker()
        if why:  # never a recording without a running source: it would save nothing
            self._reset_record_button()
            self._update_record_enabled()
            self._show_error(why)
            return None
        fmt, note = self.recording_format()
        if path is None:
            folder = self.record_folder()
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self._show_error(f"Cannot create the recording folder {folder}: {exc}")
                self._reset_record_button()
                return None
            path = folder / time.strftime(f"avatar-%Y%m%d-%H%M%S{fmt.suffix}")
        ring = self.pipeline.ring if self.pipeline is not None else None
        fps = self.record_fps()
        try:
            rec = open_recorder(path, *RECORD_SIZE, fps,
                                audio_sample_rate=AUDIO_RATE if ring is not None else None, fmt=fmt)
            self.recorder = AsyncRecorder(SyncedRecorder(rec))
        except AvatarError as exc:
            self._show_error(str(exc))
            self._reset_record_button()
            return None
        self.record_path = path
        self._record_stop_reason = ""
        self._rec_t0_ns = now_ns()
        self._rec_fps, self._rec_format = fps, fmt
        self._rec_skip0 = self.viewport.captures_skipped
        self._rec_drops_warned = (0, 0.0, False)
        self.record_drop_warning = ""
        # audio from the newest video frame's capture on (the clip starts with its first frame)
        st = self._last_state
        self._rec_audio_end_ns = st.t_capture_ns if st is not None and st.t_capture_ns < self._rec_t0_ns \
            else self._rec_t0_ns
        self._open_sidecar(path, self._rec_audio_end_ns if ring is not None else None)
        self.viewport.capture_components = 4 if rec.frame_shape[2] == 4 else 3
        self._update_capture()
        if ring is not None:
            self.audio_timer.start()
        if not self.record_button.isChecked():
            self.record_button.blockSignals(True)
            self.record_button.setChecked(True)
            self.record_button.blockSignals(False)
        self.record_button.setText("■ Stop")
        self._update_record_enabled()
        self.status.showMessage(f"Recording to {path}" + (f". {note}" if note else ""), 5000)
        return path

    def _open_sidecar(self, clip_path: Path, audio_start_ns: int | None) -> None:
        """Start the JSON Lines blendshape track beside the clip (as the CLI's render writes).

        One line per avatar state placed in the recording (record/sidecar.py);
        its ``t`` is the capture time relative to the clip's start (the earlier of
        the first frame and the first audio sample, as SyncedRecorder places them),
        which is the file time to within the audio clock's drift (about 100 ppm).
        A track that cannot be written is logged and skipped; the clip goes on.
        """
        from avatar_app.pipeline import sidecar_path_for
        from avatar_app.record.sidecar import SidecarWriter

        self.sidecar, self.sidecar_path = None, sidecar_path_for(clip_path)
        self._sidecar_t0_ns = audio_start_ns
        self._sidecar_last_t_ns = 0
        try:
            self.sidecar = SidecarWriter(self.sidecar_path, fps=self._rec_fps)
        except AvatarError as exc:
            log.warning("no blendshape track for this recording: %s", exc)
            self.sidecar_path = None

    def _write_sidecar(self, state, t_capture_ns: int) -> None:
        sidecar = self.sidecar
        if sidecar is None or state is None or t_capture_ns <= self._sidecar_last_t_ns:
            return
        if self._sidecar_last_t_ns == 0:  # the first frame: file time 0 is the earlier of it and the audio
            t0 = self._sidecar_t0_ns
            self._sidecar_t0_ns = t_capture_ns if t0 is None else min(t0, t_capture_ns)
        self._sidecar_last_t_ns = t_capture_ns
        try:
            sidecar.write(state, media_time_s=max(0.0, (t_capture_ns - self._sidecar_t0_ns) / 1e9))
        except AvatarError as exc:
            log.warning("blendshape track stopped: %s", exc)
            self.sidecar = None

    def stop_recording(self, wait: bool = True) -> None:
        """Stop and finalise the recording; says where it went.

        Args:
            wait: finish writing on this thread (True) or on a worker (False: the
                "Saved" message comes when the file is complete).
        """
        behind = self._recording_drop_counts()  # final: nothing is written after this
        dropped = sum(behind)
        rec, self.recorder = self.recorder, None
        sidecar, self.sidecar = self.sidecar, None
        sidecar_path = self.sidecar_path
        reason, self._record_stop_reason = self._record_stop_reason, ""
        self._update_capture()
        self.audio_timer.stop()
        self._reset_record_button()
        self._update_record_enabled()
        for lab in (self.status_labels["rec"], self.record_time_label):
            lab.setText("")
            lab.setStyleSheet("")
        if rec is None:
            return
        # audio up to the end of the last frame's slot, so that both tracks end together
        st = self.viewport.captured_state
        ring = self.pipeline.ring if self.pipeline is not None else None
        until = None
        if st is not None and ring is not None and ring.latest_t_ns is not None:
            until = min(st.t_capture_ns + int(1e9 / self._rec_fps), ring.latest_t_ns)
        self._on_audio_tick(rec, until)
        path = self.record_path
        fps, fmt = self._rec_fps, self._rec_format

        def finish():
            error = None
            try:
                rec.close()
            except AvatarError as exc:
                error = exc
            if sidecar is not None:
                try:
                    sidecar.close()
                except AvatarError as exc:
                    log.warning("%s", exc)
            inner = getattr(rec, "recorder", None)
            frames = int(getattr(inner, "frames_written", 0) or 0)
            return error, {"frames": frames, "reason": reason, "fps": fps, "dropped": dropped, "format": fmt,
                           "encoder_behind": behind[0] > 0,
                           "sidecar": sidecar_path if sidecar is not None else None}

        if wait:
            self._on_recording_closed(path, *finish())
        else:
            self._worker.submit(lambda: self._recording_closed.emit(path, *finish()))

    def _on_recording_closed(self, path, error, info=None) -> None:
        """Say what the finished recording holds; "Saved" only for a file with video frames in it.

        Args:
            path: the clip.
            error: the AvatarError that ended writing, or None.
            info: {"frames": video frames written, "reason": why it stopped when the
                user did not stop it ("" otherwise), "sidecar": the blendshape track or None,
                "fps": the clip's frame rate, "dropped": frames lost because the encoder could
                not keep up (see :meth:`recording_dropped`), "format": its RecordingFormat}.
        """
        info = info or {}
        frames = int(info.get("frames", 0))
        dropped = int(info.get("dropped", 0) or 0)
        fps = float(info.get("fps") or RECORD_FPS)
        reason = info.get("reason", "")
        stopped = f"Recording stopped: {reason}. " if reason else ""
        path = Path(path)
        try:
            written = path.is_file() and path.stat().st_size > 0
        except OSError:
            written = False
        if frames <= 0 or not written:
            for p in (path, info.get("sidecar")):  # an empty file is no clip: do not leave it behind
                if p is not None and Path(p).is_file():
                    try:
                        Path(p).unlink()
                    except OSError as exc:
                        log.warning("could not remove the empty recording %s: %s", p, exc)
            why = f" ({plain_error(str(error))})" if error is not None else ""
            self.last_record_message = (f"{stopped}Nothing was recorded: no avatar frame reached the recording"
                                        f"{why}, so no file was saved.")
            self._show_error(self.last_record_message)
            return
        saved = f"Saved {path} ({frames / fps:.1f} s)"
        if dropped:
            self.record_drop_warning = self.recording_drop_message(dropped, info.get("format"),
                                                                   bool(info.get("encoder_behind", True)))
            saved += f". {self.record_drop_warning}"
        if error is not None:
            self.last_record_message = (f"{stopped}The recording stopped with an error: {plain_error(str(error))}. "
                                        f"What was written is kept: {path}.")
            self._show_error(self.last_record_message)
        elif reason:
            self.last_record_message = f"{stopped}{saved}."
            self._show_error(self.last_record_message)
        else:
            self.last_record_message = saved
            self.status.showMessage(saved, 10000)

    def _stop_recording_because(self, reason: str) -> None:
        """Finish the running recording (the clip is kept) and tell the user why it stopped."""
        if self.recorder is None:
            return
        self._record_stop_reason = reason
        self.stop_recording(wait=False)

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
        rec = self.recorder
        if rec is None:
            return
        if self.output_settings.overlay_in_recording and self.pipeline is not None:
            from avatar_app.pipeline import draw_overlay

            rgb = draw_overlay(rgb, self.pipeline.stats.summary().lines())
        st = self.viewport.captured_state
        t_capture_ns = st.t_capture_ns if st is not None and st.t_capture_ns > 0 else t_ns
        try:
            queued = rec.write_video(rgb, t_capture_ns / 1e9)  # SyncedRecorder: shared-clock capture time
        except AvatarError as exc:
            log.warning("recording stopped: %s", exc)
            self.stop_recording(wait=False)  # reports the error when the file is closed
            return
        if queued:
            self._write_sidecar(st, t_capture_ns)

    def _on_audio_tick(self, rec=None, until_ns: int | None = None) -> None:
        """Hand the recorder the source's audio since the last tick (GUI timer, 10 Hz).

        Args:
            rec: the recorder (default: the running one).
            until_ns: end of the audio to write (default: 60 ms before now, so that
                late blocks have arrived).
        """
        rec = rec or self.recorder
        ring = self.pipeline.ring if self.pipeline is not None else None
        if rec is None or ring is None:
            return
        end = now_ns() - 60_000_000 if until_ns is None else int(until_ns)
        # whole samples only, so that consecutive windows continue the stream sample by sample
        n = (end - self._rec_audio_end_ns) * AUDIO_RATE // 1_000_000_000
        if n <= 0:
            return
        end = self._rec_audio_end_ns + n * 1_000_000_000 // AUDIO_RATE
        samples = ring.read_window(end, n / AUDIO_RATE)
        try:
            # SyncedRecorder: the capture time of the first sample on the shared clock
            rec.write_audio(samples, self._rec_audio_end_ns / 1e9)
        except AvatarError as exc:
            self._show_error(str(exc))
        self._rec_audio_end_ns = end

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
