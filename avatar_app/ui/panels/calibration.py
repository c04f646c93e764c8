"""Calibration wizard: neutral face, >= 500 samples of your face and voice, INT8 build + verify, delete.

Step 1 takes the neutral face after a 3 s countdown. Step 2 records calibration
samples from the running source (on the processing thread, through each
engine's ``sample_fn``) while prompts ask you to talk, look around, smile and
blink; voice samples count only while you speak (above -45 dBFS). Step 3
stores them in the engine's :class:`~avatar_app.inference.CalibrationStore`
(on this machine only) and switches every engine with samples to INT8: the
engine layer calibrates on the shipped set plus yours, builds and verifies
against FP32 in the background. Step 4 deletes the recordings.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QGroupBox, QLabel, QPushButton, QVBoxLayout

from avatar_app.core.errors import AvatarError
from avatar_app.pipeline.studio_api import MIN_USER_SAMPLES
from avatar_app.pipeline.calibration import VOICE_LEVEL_DB, SampleCollector  # noqa: F401
from avatar_app.ui.panels import Panel, ProgressBar, hint

log = logging.getLogger(__name__)

#: Prompts shown in turn while samples are recorded (each for PROMPT_S seconds).
GUIDANCE = (
    "Talk naturally – read something aloud.",
    "Look slowly left, right, up and down while you keep talking.",
    "Smile broadly, then relax.",
    "Blink a few times, then wink with each eye.",
    "Open your mouth wide, then close it; raise your eyebrows.",
    "Keep talking: count from one to twenty.",
)
PROMPT_S = 5.0


class _AutoLabel(QLabel):
    """A word-wrapped label that takes no space while it has no text."""

    def __init__(self, text: str = ""):
        super().__init__(text)
        self.setWordWrap(True)
        self.setVisible(bool(text))

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        self.setVisible(bool(text))


class CalibrationPanel(Panel):
    """The calibration wizard (see the module docstring)."""

    def __init__(self, session, bridge=None, notifier=None, target: int = MIN_USER_SAMPLES):
        super().__init__(session, bridge, notifier)
        self.target = int(target)
        self.collector: SampleCollector | None = None
        self._countdown = 0
        self._prompt_t = 0.0
        lay = QVBoxLayout(self)

        g1 = QGroupBox("1. Neutral face")
        l1 = QVBoxLayout(g1)
        l1.addWidget(hint("Look straight at the camera, relax your face, eyes open, mouth closed."))
        self.neutral_button = QPushButton("Capture neutral face (Ctrl+N)")
        self.neutral_button.clicked.connect(self.start_neutral_countdown)
        l1.addWidget(self.neutral_button)
        self.neutral_label = QLabel("Not captured yet in this session.")
        self.neutral_label.setWordWrap(True)
        l1.addWidget(self.neutral_label)
        lay.addWidget(g1)

        g2 = QGroupBox(f"2. Record {self.target} samples")  # short: the panel fits a small window's dock
        l2 = QVBoxLayout(g2)
        l2.addWidget(hint("Samples of your face and voice, used to calibrate the INT8 engines to you. "
                          "The recordings stay on this computer and can be deleted below."))
        self.record_button = QPushButton("Start recording samples")
        self.record_button.setCheckable(True)
        self.record_button.toggled.connect(self._on_record_toggled)
        l2.addWidget(self.record_button)
        self.progress = ProgressBar()
        self.progress.setRange(0, self.target)
        self.progress.setValue(0)
        self.progress.setFormat("%v / %m samples")
        l2.addWidget(self.progress)
        self.guidance = _AutoLabel()
        self.guidance.setStyleSheet("font-weight: bold;")
        l2.addWidget(self.guidance)
        self.counts_label = _AutoLabel()
        l2.addWidget(self.counts_label)
        lay.addWidget(g2)

        g3 = QGroupBox("3. Build and verify the INT8 engines")
        l3 = QVBoxLayout(g3)
        self.build_button = QPushButton("Build INT8 engines")
        self.build_button.clicked.connect(self.build_int8)
        l3.addWidget(self.build_button)
        self.build_label = _AutoLabel()
        l3.addWidget(self.build_label)
        lay.addWidget(g3)

        g4 = QGroupBox("4. Your recordings")
        l4 = QVBoxLayout(g4)
        self.stored_label = QLabel("")
        self.stored_label.setWordWrap(True)
        l4.addWidget(self.stored_label)
        self.delete_button = QPushButton("Delete my calibration recordings")
        self.delete_button.clicked.connect(self.delete_recordings)
        l4.addWidget(self.delete_button)
        lay.addWidget(g4)
        self.engines_hint = hint("")
        lay.addWidget(self.engines_hint)
        lay.addStretch(1)

        self.timer = QTimer(self)
        self.timer.setInterval(200)
        self.timer.timeout.connect(self._on_tick)
        bridge.engine_changed.connect(lambda _n: self.refresh())
        bridge.neutral_calibrated.connect(self.on_neutral_captured)
        self.refresh()

    # -- step 1 -----------------------------------------------------------------------
    def start_neutral_countdown(self) -> None:
        """Capture the neutral face after 3 s (time to relax and look at the camera)."""
        self._countdown = 15  # ticks of 200 ms
        self.neutral_label.setText("Look at the camera and relax… 3")
        self.timer.start()

    def on_neutral_captured(self) -> None:
        """After a neutral calibration (the session's ``neutral_calibrated``)."""
        import time

        self.neutral_label.setText(f"Captured at {time.strftime('%H:%M:%S')}.")
        self.refresh()

    # -- step 2 -----------------------------------------------------------------------
    def _engines_for_samples(self) -> dict:
        ctl = self.session.engines
        return {n: e.sample_fn for n, e in ctl.entries.items() if e.installed and e.sample_fn is not None}

    def start_samples(self) -> bool:
        """Start recording samples from the running source. Returns False (and says why) if it cannot."""
        engines = self._engines_for_samples()
        if not engines:
            self.guidance.setText("No learned engine is installed: nothing to calibrate.")
            return False
        s = self.session
        if s.pipeline is None:
            self.guidance.setText("Open a camera (or a file) first.")
            return False
        specs = {n: (s.engines.entry(n).info.inputs if s.engines.entry(n).info else ()) for n in engines}
        self.collector = SampleCollector(engines, specs, s.neutral_landmarks, self.target)
        s.outputs.sampler = self.collector
        self._prompt_t = 0.0
        self.timer.start()
        self._on_tick()
        return True

    def stop_samples(self, store: bool = True) -> dict[str, int]:
        """Stop recording; with ``store``, save what was collected. Returns samples stored per engine."""
        self.session.outputs.sampler = None
        col, self.collector = self.collector, None
        self.record_button.blockSignals(True)
        self.record_button.setChecked(False)
        self.record_button.blockSignals(False)
        self.record_button.setText("Start recording samples")
        stored = {}
        if col is not None and store:
            for name in col.fns:
                feeds = col.stacked(name)
                st = self.session.engines.store(name)
                if feeds is None or st is None:
                    continue
                try:
                    st.add(feeds)
                    stored[name] = next(iter(feeds.values())).shape[0]
                except (AvatarError, OSError) as exc:
                    self.notifier.error(f"Could not store the calibration samples of {name}: {exc}")
            errs = "; ".join(f"{n}: {e}" for n, e in col.errors.items())
            text = ", ".join(f"{n} {k}" for n, k in stored.items()) or "nothing"
            self.guidance.setText(f"Stored {text} samples." + (f" Skipped {errs}." if errs else ""))
        self.refresh()
        return stored

    def _on_record_toggled(self, on: bool) -> None:
        if on:
            if self.start_samples():
                self.record_button.setText("Stop and keep the samples")
            else:
                self.record_button.blockSignals(True)
                self.record_button.setChecked(False)
                self.record_button.blockSignals(False)
        else:
            self.stop_samples()

    def _on_tick(self) -> None:
        if self._countdown > 0:
            self._countdown -= 1
            if self._countdown == 0:
                self.session.calibrate_neutral()
                if self.session.neutral_landmarks is None:
                    self.neutral_label.setText("No face found: look at the camera and try again.")
            else:
                self.neutral_label.setText(f"Look at the camera and relax… {1 + self._countdown // 5}")
        col = self.collector
        if col is not None:
            self._prompt_t += self.timer.interval() / 1000.0
            self.guidance.setText(GUIDANCE[int(self._prompt_t // PROMPT_S) % len(GUIDANCE)])
            counts = col.counts()
            live = [n for n in col.fns if n not in col.errors]
            self.progress.show_value(min((counts[n] for n in live), default=0))
            labels = {"face_recon": "face", "speech2face": "voice (counts while you talk)"}
            parts = [f"{labels.get(n, n)} {counts[n]}/{self.target}" for n in col.fns]
            parts += [f"{n}: {e}" for n, e in col.errors.items()]
            self.counts_label.setText(" · ".join(parts))
            if col.done():
                self.stop_samples()
        if self._countdown <= 0 and self.collector is None:
            self.timer.stop()

    # -- step 3 -----------------------------------------------------------------------
    def build_int8(self) -> dict:
        """Switch every engine that has stored samples to INT8 (built and verified in the background).

        Returns:
            engine name -> the Future of its request.
        """
        ctl = self.session.engines
        futures = {}
        for name, e in ctl.entries.items():
            st = ctl.store(name)
            if st is None or not st.files() or e.slot is None:
                continue
            backend = e.choice[0]
            if ctl.precision_reason(name, backend, "int8"):
                backend = "ort_cpu"
            fut = self.session.set_engine_choice(name, backend, "int8")
            if fut is not None:
                futures[name] = fut
        self.build_label.setText("Building and verifying: " + ", ".join(futures) if futures else
                                 "Nothing to build: record samples first (step 2).")
        self.refresh()
        return futures

    # -- step 4 -----------------------------------------------------------------------
    def delete_recordings(self) -> int:
        """Delete every stored calibration sample file of every engine; returns how many were deleted."""
        n = 0
        for name in self.session.engines.entries:
            st = self.session.engines.store(name)
            if st is not None:
                n += st.clear()
        self.stored_label.setText(f"Deleted {n} file(s).")
        self.refresh(keep_stored_text=True)
        return n

    # -- refresh ----------------------------------------------------------------------
    def refresh(self, keep_stored_text: bool = False) -> None:
        """Show what is installed, stored and in use."""
        ctl = self.session.engines
        installed = [n for n, e in ctl.entries.items() if e.installed]
        has_engines = bool(installed)
        self.record_button.setEnabled(has_engines)
        self.build_button.setEnabled(has_engines)
        self.engines_hint.setText("" if has_engines else
                                  "No learned engine is installed (models/face_recon.onnx, "
                                  "models/speech2face.onnx), so steps 2-4 have nothing to calibrate. "
                                  "The neutral face still improves the geometric solver.")
        lines = []
        for name in installed:
            st = ctl.store(name)
            files = st.files() if st is not None else []
            size = sum(p.stat().st_size for p in files if p.exists()) / 1e6
            lines.append(f"{ctl.entry(name).label}: {len(files)} file(s), {size:.1f} MB")
            runner = ctl.active(name)
            if runner is not None and runner.precision.value == "int8" and not ctl.pending(name):
                v = getattr(runner, "verification", None)
                self.build_label.setText(f"{ctl.entry(name).label}: INT8 in use. "
                                         + (v.summary() if v is not None else ""))
        folder = ctl.store(installed[0]).root if installed else None
        if folder is not None:
            home = str(Path.home())
            folder = "~" + str(folder)[len(home):] if str(folder).startswith(home + "/") else str(folder)
        if not keep_stored_text:
            self.stored_label.setText(("\n".join(lines) + (f"\nKept in {folder}" if folder else ""))
                                      if lines else "No recordings stored.")
        self.delete_button.setEnabled(has_engines)

    def shutdown(self) -> None:
        """Stop recording samples (window closing)."""
        self.session.outputs.sampler = None
        self.collector = None
        self.timer.stop()
