"""The studio window: layout, menus and actions around a Qt-free studio session.

Layout: the viewport in the centre; Sources (camera, microphone, file, camera
preview) on the left; Engines, Calibration, Tracking, Expressions, Avatar and
Output tabbed on the right; latency plots at the bottom; a toolbar with the
record button. Every dock can be moved, floated or closed (View menu);
Ctrl+H hides them all for a clean capture view. Window layout and every
panel's settings persist in QSettings and are restored on the next start.

What the studio does lives in :class:`~avatar_app.pipeline.session.StudioSession`
(``MainWindow.session``: sources, live pipeline, engines, outputs, settings);
:class:`~avatar_app.ui.bridge.SessionBridge` turns its events into Qt signals;
:class:`~avatar_app.ui.live_view.LiveView` shows it (viewport, preview, status
bar); :class:`~avatar_app.ui.recording.RecordingController` records it. Panels
get the session and these controllers, never the window.

Threads: the GUI thread only shows results. Opening a source, engine builds,
backend probing, device listing, avatar loading and finishing a recording run
on worker threads.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QTabBar,
    QToolBar,
)

# imported here, on the GUI thread, before any worker starts (studio_api imports the capture package
# first: device-listing and opener threads importing it at the same time could see it half initialised)
import avatar_app.pipeline.studio_api  # noqa: F401,E402
from avatar_app.pipeline.session import AUDIO_RATE, StudioSession
from avatar_app.ui.bridge import SessionBridge
from avatar_app.ui.live_view import LiveView
from avatar_app.ui.messages import Notifier
from avatar_app.ui.priority import ThreadPriorities
from avatar_app.ui.recording import RecordingController
from avatar_app.ui.viewport import AvatarViewportWidget

log = logging.getLogger(__name__)

#: How long the "Press Ctrl+H to show panels" hint stays on the clean capture view, ms.
CLEAN_VIEW_HINT_MS = 3000
#: Preferred width of the side dock areas, px (the default layout; a squeezed area grows back to it).
SIDE_DOCK_WIDTHS = {"sources": 350, "tracking": 420}
#: Width the viewport keeps at least while side docks grow back, px.
VIEW_KEEP_WIDTH = 480
VIDEO_FILTER = "Videos (*.mp4 *.mpg *.mov *.mkv *.webm *.avi);;All files (*)"


class MainWindow(QMainWindow):
    """The streamer's window.

    Args:
        source: a video file to play live, or None for the camera.
        camera: camera index (default: the last used, else 0).
        settings: QSettings to persist into (tests pass a temporary one).
        engines: the EngineController (default: one over ``models/``; started by the session).
        reconstructor_factory: ``f(engines) -> FaceReconstructor or None`` for every new
            pipeline instead of the stage factory's choice (tests wire an EngineSlot stand-in).
        speech_factory: ``f(engines) -> SpeechAnimator or None`` likewise.

    Attributes:
        session: the StudioSession. bridge: its SessionBridge. live: the LiveView.
        recording: the RecordingController. notifier: the Notifier. panels, docks: by key.

    Thread: GUI thread only.
    """

    def __init__(self, source: Path | None = None, camera: int | None = None, settings: QSettings | None = None,
                 engines=None, reconstructor_factory: Callable | None = None, speech_factory: Callable | None = None):
        super().__init__()
        from avatar_app.ui.devices import resolve_camera_id

        # tooltips also while a message box or another program is active: the disabled Record
        # button's tooltip says why it is disabled
        self.setAttribute(Qt.WidgetAttribute.WA_AlwaysShowToolTips)
        self.settings = settings or QSettings("avatar_app", "avatar_app")
        self.setWindowTitle("avatar_app studio")
        # the GUI thread first: every other thread (and what it starts) runs at a lower priority,
        # except the audio opener's (audio callbacks must not be late); see ui/priority.py
        self.priorities = ThreadPriorities()
        self.bridge = SessionBridge(self)
        self.session = StudioSession(self.settings, engines, dispatch=self.bridge.dispatch,
                                     priorities=self.priorities, resolve_camera=resolve_camera_id,
                                     reconstructor_factory=reconstructor_factory, speech_factory=speech_factory)
        self.bridge.attach(self.session)
        s = self.session
        bg = s.settings.avatar.background
        self.viewport = AvatarViewportWidget(self, background=bg if isinstance(bg, str) else tuple(bg),
                                             msaa=s.effective_msaa(), lighting=s.settings.avatar.lighting)
        self.setCentralWidget(self.viewport)
        self.setAcceptDrops(True)  # drop a video to play it, an avatar (.glb/.gltf/.vrm) to load it
        self.status = self.statusBar()
        self.notifier = Notifier(self, self.status)
        #: Record button, Ctrl+R, the clip, its audio and blendshape track (ui/recording.py).
        self.recording = RecordingController(s, self.viewport, self.notifier, AUDIO_RATE, parent=self)
        self._clean_view = False
        self._build_panels()
        self._build_actions()
        self._build_status_bar()
        self.live = LiveView(s, self.bridge, self.viewport, self.notifier, self.recording, self.panels,
                             self.status_labels, self.panels_visible, self._raise_sources, parent=self)
        self.resize(1440, 900)
        self._restore_layout()
        self._settings_warned = False
        if not self.settings.isWritable():
            QTimer.singleShot(0, self.check_settings_saved)  # once the window shows: said in its status bar
        self.recording.update_format_note()
        self.recording.update_enabled()
        self.live.start()
        s.start(source, camera)
        if s.settings.avatar.path:
            s.load_avatar(Path(s.settings.avatar.path))

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

        s, b, n = self.session, self.bridge, self.notifier
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks)
        sources = SourcesPanel(s, b, n)
        self.panels = {"preview": sources.preview_panel, "sources": sources, "engines": EnginesPanel(s, b, n),
                       "calibration": CalibrationPanel(s, b, n), "tracking": TrackingPanel(s, b, n),
                       "expressions": ExpressionsPanel(s, b, n), "avatar": AvatarPanel(s, b, n),
                       "output": OutputPanel(s, b, n, self.recording),
                       "latency": LatencyPanel(s, b, n, history=lambda: self.live)}
        self.docks: dict[str, QDockWidget] = {}
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        bottom = Qt.DockWidgetArea.BottomDockWidgetArea
        self.setCorner(Qt.Corner.BottomLeftCorner, left)
        self.setCorner(Qt.Corner.BottomRightCorner, right)
        titles = {"preview": "Camera preview", "sources": "Sources", "engines": "Engines",
                  "calibration": "Calibration", "tracking": "Tracking", "expressions": "Expressions",
                  "avatar": "Avatar", "output": "Output", "latency": "Latency"}
        areas = {"preview": left, "sources": left, "engines": left, "calibration": left, "latency": bottom}
        for key, panel in self.panels.items():
            dock = QDockWidget(titles[key], self)
            dock.setObjectName(f"{key}_dock")
            dock.setWidget(panel if key in ("preview", "latency") else panel.scroll_wrapped())
            self.addDockWidget(areas.get(key, right), dock)
            dock.visibilityChanged.connect(lambda _on: QTimer.singleShot(0, self.hide_stray_tab_bars))
            self.docks[key] = dock
        for group in (("sources", "engines", "calibration"), ("tracking", "expressions", "avatar", "output")):
            for key in group[1:]:
                self.tabifyDockWidget(self.docks[group[0]], self.docks[key])
            self.docks[group[0]].raise_()
        self.resizeDocks([self.docks[k] for k in SIDE_DOCK_WIDTHS], list(SIDE_DOCK_WIDTHS.values()),
                         Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["preview"], self.docks["sources"]], [300, 560], Qt.Orientation.Vertical)
        self.resizeDocks([self.docks["latency"]], [230], Qt.Orientation.Vertical)

    def _action(self, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        a = QAction(text, self)
        if shortcut:
            a.setShortcut(QKeySequence(shortcut))
        a.setToolTip(tip or text)
        a.triggered.connect(lambda _checked=False, f=slot: f())
        self.addAction(a)  # shortcuts keep working with the menu bar hidden
        return a

    def _build_actions(self) -> None:
        act, p = self._action, self.panels
        m = self.menuBar().addMenu("&File")
        m.addAction(act("&Open video…", self._on_open_dialog, QKeySequence.StandardKey.Open))
        m.addAction(act("Use &camera", lambda: self.session.open_camera(
            self.session.camera_index or self.settings.value("camera", 0, type=int), wait=False)))
        m.addAction(act("Load &avatar…", p["avatar"].choose_file))
        m.addSeparator()
        self.record_action = act("&Record", self.recording.toggle_recording, "Ctrl+R")
        m.addAction(self.record_action)
        m.addAction(act("Choose recording &folder…", p["output"].choose_folder))
        m.addSeparator()
        self.export_action = act("&Export settings…", self._on_export_settings, tip="Save the studio's settings "
                                 "to a file for `avatar-app render --settings FILE`")
        m.addAction(self.export_action)
        self.import_action = act("&Import settings…", self._on_import_settings, tip="Load a settings file (as "
                                 "exported, or for `render --settings`) into the studio; applied at once and kept")
        m.addAction(self.import_action)
        m.addSeparator()
        m.addAction(act("&Quit", self.quit, QKeySequence.StandardKey.Quit))
        t = self.menuBar().addMenu("&Tracking")
        self.neutral_action = act("Calibrate &neutral face", self.session.calibrate_neutral, "Ctrl+N",
                                  "Take your current face as the neutral face (look straight, relax)")
        t.addAction(self.neutral_action)
        v = self.menuBar().addMenu("&View")
        self.hide_panels_action = act("&Hide panels (clean capture view)", self.toggle_panels, "Ctrl+H")
        v.addAction(self.hide_panels_action)
        v.addSeparator()
        for dock in self.docks.values():
            v.addAction(dock.toggleViewAction())
        tb = QToolBar("Controls", self)
        tb.setObjectName("controls_toolbar")
        tb.setMovable(False)
        tb.addWidget(self.recording.record_button)
        tb.addWidget(self.recording.record_time_label)
        tb.addSeparator()
        tb.addAction(self.neutral_action)
        tb.addAction(self.hide_panels_action)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, tb)
        self.toolbar = tb

    def _build_status_bar(self) -> None:
        self.status_labels: dict[str, QLabel] = {}
        for key, tip in (("engines", "Active backend and precision per engine"),
                         ("fps", "Frames processed per second"),
                         ("c2s", "Camera-to-screen latency, median over the last 5 s"),
                         ("dropped", "Camera frames you did not see: never shown in the view (newest frame wins), "
                                     "plus frames a recording lost; the toolbar and the overlay show the same count"),
                         ("face", "Whether the face tracker finds a face in the source")):
            lab = QLabel("")
            lab.setToolTip(tip)
            self.status.addPermanentWidget(lab)
            self.status_labels[key] = lab
        self.status_labels["rec"] = self.recording.status_label
        self.status.addPermanentWidget(self.recording.status_label)
        # long messages: fps, latency and drops (in the overlay and Latency panel too) make room, then the engines
        lab = self.status_labels
        self.notifier.set_permanent(list(lab.values()), [[lab["fps"], lab["c2s"], lab["dropped"]], [lab["engines"]]])

    def _restore_layout(self) -> None:
        geo, state = self.settings.value("window/geometry"), self.settings.value("window/state")
        if geo is not None:
            self.restoreGeometry(geo)
        if state is not None:
            self.restoreState(state)
            QTimer.singleShot(0, self.hide_stray_tab_bars)
        # a layout saved in a small window restores its squeezed side docks: grown back once laid out
        QTimer.singleShot(0, self.regrow_side_docks)

    def regrow_side_docks(self) -> list[str]:
        """Widen the side dock areas squeezed below their panel's minimum width; returns the keys widened.

        Shrinking the window takes the side docks' width and growing it gives the width to the
        viewport only: the Tracking panel stayed cut with a horizontal scroll bar, and that layout was
        saved and restored. Each left/right area whose front panel needs more width than its dock has
        gets it back, up to its preferred width (SIDE_DOCK_WIDTHS, else the panel's minimum), while the
        viewport keeps VIEW_KEEP_WIDTH px. An area the user narrowed but where the panel still fits is
        left alone. Called after each window resize and after the layout is restored.
        """
        from PySide6.QtWidgets import QScrollArea

        grow: dict[QDockWidget, int] = {}
        for key, dock in self.docks.items():
            area = self.dockWidgetArea(dock)
            if (dock.isFloating() or not dock.isVisible() or dock.visibleRegion().isEmpty()
                    or area not in (Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea)):
                continue
            scroll = dock.widget()
            if not isinstance(scroll, QScrollArea) or scroll.widget() is None:
                continue
            need = scroll.widget().minimumSizeHint().width() + (dock.width() - scroll.viewport().width())
            if dock.width() >= need:
                continue
            grow[dock] = max(need, SIDE_DOCK_WIDTHS.get(key, need))
        spare = self.centralWidget().width() - VIEW_KEEP_WIDTH
        if not grow or spare <= 0:
            return []
        docks, sizes = [], []
        for dock, want in grow.items():
            extra = min(want - dock.width(), spare)
            if extra <= 0:
                continue
            spare -= extra
            docks.append(dock)
            sizes.append(dock.width() + extra)
        if docks:
            self.resizeDocks(docks, sizes, Qt.Orientation.Horizontal)
        return [k for k, d in self.docks.items() if d in docks]

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        if event.size().width() > event.oldSize().width() >= 0:
            QTimer.singleShot(0, self.regrow_side_docks)  # once the docks' layout has the new width

    def hide_stray_tab_bars(self) -> list[QTabBar]:
        """Hide the window's tab bars that hold no tab; returns them.

        ``restoreState`` (a restart, Ctrl+H twice) and closing docks leave the dock areas' previous
        tab bars shown, empty, at stale positions: slivers of them showed behind the viewport's edge.
        """
        stray = [b for b in self.findChildren(QTabBar) if b.parent() is self and b.count() == 0 and b.isVisible()]
        for bar in stray:
            bar.hide()
        return stray

    # ================================================================== menus
    def _on_open_dialog(self) -> None:
        start = self.settings.value("last_file", str(Path.home()), type=str)
        path, _ = QFileDialog.getOpenFileName(self, "Open a video", start, VIDEO_FILTER)
        if path:
            self.session.open_file(Path(path), wait=False)

    def _on_export_settings(self, path: Path | None = None) -> Path | None:
        """File › Export settings…: write the settings file ``render --settings`` reads; returns its path."""
        from avatar_app.ui.settings_file import export_settings

        return export_settings(self, path)

    def _on_import_settings(self, path: Path | None = None) -> list[str] | None:
        """File › Import settings…: apply a settings file at once; returns the rejected values (ui/settings_file.py)."""
        from avatar_app.ui.settings_file import import_settings

        return import_settings(self, path)

    def _raise_sources(self) -> None:
        if self.docks["sources"].isVisible():
            self.docks["sources"].raise_()

    def toggle_panels(self, hide: bool | None = None) -> None:
        """Hide (or show again) every panel, the menu, toolbar and status bar: a clean capture view."""
        hide = self.panels_visible() if hide is None else hide
        if hide and not self._clean_view:  # hiding twice must not forget the panels
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
        self._clean_view = self.live.clean_view = hide
        for w in (self.menuBar(), self.toolbar, self.status):
            w.setVisible(not hide)
        self.live.update_overlay()  # off on the clean view; the user's setting again with the panels
        # menus and toolbar are gone too: say how to get them back
        self.viewport.flash_hint("Press Ctrl+H to show panels" if hide else None, CLEAN_VIEW_HINT_MS)
        self.live.show_no_face(self.live.no_face_shown)
        self.hide_stray_tab_bars()
        QTimer.singleShot(0, self.hide_stray_tab_bars)  # the docks' layout runs once more

    def front_tabs(self) -> list[str]:
        """Keys of the docks in front of their tab group (one per group of tabbed docks)."""
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

    def save_settings(self) -> None:
        """Write every area and the window layout.

        On the clean capture view (Ctrl+H) the layout saved is the one from before Ctrl+H
        (docks and toolbar as they were), so that the next start shows the panels; a
        layout taken with every dock hidden would start with none and no hint.
        """
        self.session.save_settings()
        self.settings.setValue("window/geometry", self.saveGeometry())
        state = getattr(self, "_dock_state", None) if self._clean_view else None
        self.settings.setValue("window/state", state if state is not None else self.saveState())
        self.settings.sync()
        self.check_settings_saved()

    def check_settings_saved(self) -> bool:
        """Whether the settings file can be written; says once in the status bar when not.

        A read-only or immutable settings file (or one in a folder that cannot be made) left settings
        and layout silently unsaved (QSettings.status() AccessError); the studio keeps running.
        """
        from PySide6.QtCore import QSettings as _QSettings

        ok = self.settings.isWritable() and self.settings.status() != _QSettings.Status.AccessError
        if not ok and not self._settings_warned:
            self._settings_warned = True
            self.notifier.status_error(f"Settings could not be saved: {self.settings.fileName()} is not writable")
        return ok

    # ================================================================== drag and drop, keys
    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if any(self._drop_kind(Path(u.toLocalFile())) for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        for u in event.mimeData().urls():
            path = Path(u.toLocalFile())
            kind = self._drop_kind(path)
            if kind == "avatar":
                self.panels["avatar"].load(path)
            elif kind == "video":
                self.session.open_file(path, wait=False)
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

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not event.isAutoRepeat() and self.panels["expressions"].handle_key(event, pressed=True):
            event.accept()
            return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not event.isAutoRepeat() and self.panels["expressions"].handle_key(event, pressed=False):
            event.accept()
            return
        super().keyReleaseEvent(event)

    # ================================================================== close
    def quit(self) -> None:
        """File › Quit and Ctrl+C in the terminal: close the window (a recording is finished), then the app."""
        if self.close():
            app = QApplication.instance()
            if app is not None:
                app.quit()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self.save_settings()
        self.recording.stop_recording()
        self.live.stop()
        self.recording.audio_timer.stop()
        for p in self.panels.values():
            if hasattr(p, "shutdown"):
                p.shutdown()
        self.session.close()
        self.viewport.shutdown()
        super().closeEvent(event)


__all__ = ["MainWindow"]
