"""Latency panel: per-stage ms and camera-to-screen ms over the last 30 s, fps and dropped frames.

The plots are drawn on the GUI thread, which also paints every rendered frame, so they are
kept cheap: redrawn twice a second, no grid (pyqtgraph draws the grid with the axis item,
across the whole plot, so every curve update re-played the axis's text: ~3 ms per axis),
axes cached as pixmaps, and a y range that moves in steps (:data:`Y_STEPS`) instead of
following the data at every update (which redraws the axis).
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QCheckBox, QGraphicsItem, QHBoxLayout, QLabel, QVBoxLayout

from avatar_app.pipeline import settings as store
from avatar_app.ui.panels import Panel, legend_label, pyqtgraph, set_legend

#: Colours of the stage curves (colour-blind-safe Okabe-Ito palette).
_COLOURS = [(0, 114, 178), (230, 159, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233), (213, 94, 0),
            (240, 228, 66), (120, 120, 120)]
#: Redraw period of the plots, ms.
UPDATE_MS = 500
#: Window of the "dropped per second" curve: drops over the last this many seconds / this many
#: seconds (the window's drop counter is sampled every 200 ms, and drops come in bursts: a rate
#: over one 200 ms step showed 100 drops a second from a 25 fps source).
DROP_RATE_WINDOW_S = 2.0
#: Tops of the y axes: the smallest one above the data shown (ms, or fps and drops per second).
Y_STEPS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def y_top(values) -> float:
    """The y-axis top for ``values``: the smallest of :data:`Y_STEPS` at or above 1.05 x their
    largest finite value (10 for none; the largest step beyond it)."""
    a = np.asarray(values, np.float64)
    a = a[np.isfinite(a)]
    peak = 1.05 * float(a.max()) if a.size else 0.0
    return float(next((s for s in Y_STEPS if s >= peak), Y_STEPS[-1]))


def drop_rate(t_s, dropped, window_s: float = DROP_RATE_WINDOW_S) -> np.ndarray:
    """Dropped frames per second at each sample: the drops over the ``window_s`` before it / ``window_s``.

    Args:
        t_s: (N,) sample times, s, increasing.
        dropped: (N,) the window's drop counter at those times (never decreasing; a
            decrease, a new source, counts as 0 drops).
        window_s: the window, s (> 0). Before a whole window of history, the drops
            since the first sample are still divided by ``window_s``, so the start never spikes.

    Returns:
        (N,) float64 drops per second; at most the source's frame rate when only the
        source's frames are dropped.
    """
    t = np.asarray(t_s, np.float64)
    # the drops so far, from the counter's rises only: after a reset (a new source) its new drops count
    # at once, where a running maximum would hide them until they passed the old count
    rises = np.maximum(np.diff(np.asarray(dropped, np.float64)), 0.0)
    d = np.concatenate([[0.0], np.cumsum(rises)]) if len(t) else np.zeros(0)
    j = np.searchsorted(t, t - window_s, side="left")  # the first sample within the window
    return (d - d[j]) / float(window_s)


class LatencyPanel(Panel):
    """Two pyqtgraph plots over the last 30 s: milliseconds per stage and camera-to-screen;
    frames per second and dropped frames. Updated twice a second while visible (see the module
    docstring for what keeps them cheap).
    """

    def __init__(self, session, bridge=None, notifier=None, history=None):
        pg = pyqtgraph()

        super().__init__(session, bridge, notifier)
        #: ``history()`` -> the LiveView (``latency_history``, ``fps_history``), or None before it exists.
        self.history = history or (lambda: None)
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.overlay_box = QCheckBox("Latency overlay in the viewport")
        self.overlay_box.setChecked(session.store.value("overlay", True, type=bool))
        self.overlay_box.toggled.connect(lambda on: session.store.setValue("overlay", on))
        top.addWidget(self.overlay_box)
        top.addStretch(1)
        self.summary = QLabel("")
        top.addWidget(self.summary)
        lay.addLayout(top)
        legends = QHBoxLayout()
        self.ms_legend = legend_label([])
        legends.addWidget(self.ms_legend, 3)
        legends.addWidget(legend_label([("fps", (0, 114, 178)), ("dropped per second", (213, 94, 0))]), 2)
        lay.addLayout(legends)
        plots = QHBoxLayout()
        self.ms_plot = pg.PlotWidget()
        self.ms_plot.setBackground(None)
        self.ms_plot.setLabel("left", "ms")
        self.ms_plot.setLabel("bottom", "seconds")
        self.ms_plot.setMouseEnabled(False, False)
        self.ms_plot.hideButtons()
        self.ms_plot.setXRange(-30, 0, padding=0)
        self.fps_plot = pg.PlotWidget()
        self.fps_plot.setBackground(None)
        self.fps_plot.setLabel("left", "fps")
        self.fps_plot.setLabel("bottom", "seconds")
        self.fps_plot.setMouseEnabled(False, False)
        self.fps_plot.hideButtons()
        self.fps_plot.setXRange(-30, 0, padding=0)
        self.fps_curve = self.fps_plot.plot(pen=pg.mkPen((0, 114, 178), width=2))
        self.dropped_curve = self.fps_plot.plot(pen=pg.mkPen((213, 94, 0), width=1))
        plots.addWidget(self.ms_plot, 3)
        plots.addWidget(self.fps_plot, 2)
        lay.addLayout(plots)
        self._y_tops: dict[int, float] = {}
        for p in (self.ms_plot, self.fps_plot):
            p.setMinimumHeight(120)
            p.enableAutoRange(y=False)
            self._set_y_top(p, Y_STEPS[0])
            for side in ("left", "bottom"):
                p.getAxis(side).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.curves: dict[str, object] = {}
        self._legend: list = []
        self.timer = QTimer(self)
        self.timer.setInterval(UPDATE_MS)
        self.timer.timeout.connect(self.update_plots)
        self.timer.start()

    def _set_y_top(self, plot, top: float) -> None:
        """Set ``plot``'s y range to 0..``top`` unless it is that already (a new range redraws the axis)."""
        if self._y_tops.get(id(plot)) != top:
            self._y_tops[id(plot)] = top
            plot.setYRange(0, top, padding=0)

    def _curve(self, name: str):
        pg = pyqtgraph()

        c = self.curves.get(name)
        if c is None:
            colour = (0, 0, 0) if name == "camera-to-screen" else _COLOURS[len(self.curves) % len(_COLOURS)]
            width = 2 if name == "camera-to-screen" else 1
            c = self.ms_plot.plot(pen=pg.mkPen(colour, width=width))
            self.curves[name] = c
            self._legend.append((name, colour))
            set_legend(self.ms_legend, self._legend)
        return c

    def series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Stage (and "camera-to-screen") -> (seconds before now, ms) over the plot window."""
        live = self.history()
        hist = list(live.latency_history) if live is not None else []
        if not hist:
            return {}
        t_end = hist[-1][0]
        t = np.array([h[0] for h in hist]) - t_end
        out = {"camera-to-screen": (t, np.array([h[2] for h in hist]))}
        names: list[str] = []
        for h in hist[-50:]:
            names += [k for k in h[1] if k not in names]
        for name in names:
            out[name] = (t, np.array([h[1].get(name, np.nan) for h in hist]))
        return out

    def update_plots(self) -> None:
        """Redraw (skipped while hidden or when the CPU mode pauses plots)."""
        live = self.history()
        if live is None or not self.isVisible() or not store.CPU_MODES[self.session.settings.output.cpu_mode][3]:
            return
        series = self.series()
        for name, (t, ms) in series.items():
            self._curve(name).setData(t, ms, connect="finite")
        if series:
            self._set_y_top(self.ms_plot, y_top(np.concatenate([ms for _, ms in series.values()])))
        fh = list(live.fps_history)
        if len(fh) >= 2:
            t = np.array([f[0] for f in fh]) - fh[-1][0]
            fps = np.array([f[1] for f in fh])
            self.fps_curve.setData(t, fps)
            per_s = drop_rate(t, [f[2] for f in fh])
            self.dropped_curve.setData(t, per_s)
            self._set_y_top(self.fps_plot, y_top(np.concatenate([fps, per_s])))

    def show_summary(self, fps: float, dropped: int) -> None:
        """The panel's "N fps · dropped M" line, set with the status bar and the overlay from one summary.

        The window's slow tick calls it with the numbers it shows everywhere else (one
        drop counter), so the panel never shows an older count than the status bar.
        """
        self.summary.setText(f"{fps:.1f} fps · dropped {dropped}")
