"""Calibration samples from the live stream, for the INT8 engines (Qt-free).

:class:`SampleCollector` is installed as the session's per-frame sampler
(:attr:`avatar_app.pipeline.outputs.LiveOutputs.sampler`) by the calibration
wizard; on the processing thread it turns each frame into one sample per
engine through the engine's ``sample_fn`` (the engine's own pre-processing,
:mod:`avatar_app.pipeline.engines`).
"""
from __future__ import annotations

import threading

import numpy as np

from avatar_app.core.errors import AvatarError
from avatar_app.inference import MIN_USER_SAMPLES

#: Voice samples count only while the input is above this level (you are talking), dBFS.
VOICE_LEVEL_DB = -45.0
#: Level meter range, dBFS.
METER_FLOOR_DB = -60.0


def level_dbfs(samples: np.ndarray) -> float:
    """RMS level of (N,) float32 audio in dBFS (full-scale sine = -3 dBFS), floored at METER_FLOOR_DB."""
    if samples.size == 0:
        return METER_FLOOR_DB
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    return max(METER_FLOOR_DB, 20.0 * np.log10(rms) if rms > 0 else METER_FLOOR_DB)



class SampleCollector:
    """Collects calibration samples on the processing thread.

    Args:
        engines: engine name -> sample_fn (see :data:`avatar_app.pipeline.engines.SampleFn`).
        specs: engine name -> the model's input TensorSpecs (checked on the first sample).
        neutral: the neutral face's Landmarks, or None.
        target: samples wanted per engine.

    Thread: ``__call__`` on the processing thread; the rest from the GUI thread.
    """

    def __init__(self, engines: dict, specs: dict, neutral, target: int = MIN_USER_SAMPLES):
        self.fns = dict(engines)
        self.specs = dict(specs)
        self.neutral = neutral
        self.target = int(target)
        self.samples: dict[str, list[dict[str, np.ndarray]]] = {n: [] for n in self.fns}
        self.errors: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, landmarks, audio) -> None:
        """Offer one frame: its Landmarks (or None: no face), (N,) 16 kHz audio (or None: silence).

        A sample whose inputs equal the engine's previous sample is not kept (a still or a
        one-frame file that loops would fill the set with copies of one frame)."""
        for name, fn in self.fns.items():
            if name in self.errors or len(self.samples[name]) >= self.target:
                continue
            try:
                feeds = fn(landmarks, self.neutral, audio)
            except AvatarError as exc:
                self.errors[name] = str(exc)
                continue
            if feeds is None:
                continue
            if not self.samples[name]:
                why = self._mismatch(name, feeds)
                if why:
                    self.errors[name] = why
                    continue
            sample = {k: np.asarray(v) for k, v in feeds.items()}
            last = self.samples[name][-1] if self.samples[name] else None
            if last is not None and last.keys() == sample.keys() and all(
                    np.array_equal(last[k], sample[k]) for k in sample):
                continue  # the same inputs again (a still or one-frame file looping): they add nothing
            with self._lock:
                self.samples[name].append(sample)

    def _mismatch(self, name: str, feeds: dict) -> str:
        for spec in self.specs.get(name, ()):
            if spec.name not in feeds:
                return f"the samples lack the model input '{spec.name}'"
            try:
                spec.check(np.asarray(feeds[spec.name]))
            except AvatarError as exc:
                return f"the samples do not fit the model: {exc}"
        return ""

    def __call__(self, state, pipeline) -> None:
        """The session's per-frame hook (processing thread): the frame's landmarks and, while the
        user talks, the last second of audio."""
        if pipeline is None:
            return
        lm = pipeline.processor.last_landmarks
        lm = lm if state.face_found else None
        audio = None
        ring = pipeline.ring
        if ring is not None:
            window = ring.read_window(state.t_capture_ns, 1.0)
            if level_dbfs(window[-1600:]) > VOICE_LEVEL_DB:
                audio = window
        self.add(lm, audio)

    def counts(self) -> dict[str, int]:
        """Samples collected per engine."""
        with self._lock:
            return {n: len(v) for n, v in self.samples.items()}

    def done(self) -> bool:
        """Whether every engine without an error has its target."""
        c = self.counts()
        return all(c[n] >= self.target for n in self.fns if n not in self.errors)

    def stacked(self, name: str) -> dict[str, np.ndarray] | None:
        """The samples of ``name`` stacked on axis 0 (None when there are none)."""
        with self._lock:
            items = list(self.samples[name])
        if not items:
            return None
        return {k: np.concatenate([it[k] for it in items], axis=0) for k in items[0]}
