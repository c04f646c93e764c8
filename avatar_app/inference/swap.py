"""Change an engine's backend or precision while the pipeline runs.

:class:`EngineSlot` holds the active engine of one model. ``request(backend,
precision)`` builds, verifies and opens the new engine on a background thread
while the old one keeps serving; the swap happens under the slot's lock, i.e.
between two ``infer`` calls, and only a fully opened, verified engine is ever
put in the slot. A failed request leaves the old engine serving.

A slot can also serve a model's conv-state (streaming) graph beside each engine
(:meth:`EngineSlot.enable_conv_state`, :mod:`avatar_app.inference.conv_state`): it is
derived for every new ONNX Runtime CPU FP32 engine before that engine is swapped in
(on the worker thread), and swapped together with it.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from avatar_app.core.errors import AvatarError, ModelLoadError
from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.manager import EngineManager, OpenResult

logger = logging.getLogger(__name__)


class EngineSlot:
    """The active engine of one model, swappable between calls.

    Args:
        manager: builds and opens engines.
        model_path: FP32 source ONNX.
        card: optional model-card dict.
        on_change: called as ``on_change(result, error)`` from the worker thread after
            each request: ``result`` the :class:`OpenResult` now serving (None on error),
            ``error`` the exception of a failed request (None on success).

    Thread: ``infer`` from one processing thread; ``request`` from any thread
    (the GUI's settings panel). ``on_change`` runs on the slot's worker thread:
    a Qt bridge must re-emit it as a signal.
    """

    def __init__(self, manager: EngineManager, model_path: str | Path, card: Mapping | None = None,
                 on_change: Callable[[OpenResult | None, BaseException | None], None] | None = None):
        self.manager = manager
        self.model_path = Path(model_path)
        self.card = dict(card) if card else None
        self.on_change = on_change
        self._lock = threading.Lock()
        self._active: BaseRunner | None = None
        self._result: OpenResult | None = None
        self._generation = 0
        self._pending = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-swap-{self.model_path.stem}")
        self.swaps = 0
        self.last_error: BaseException | None = None
        self._streaming = False
        self._stream = None  # the ConvStateEngine of the active runner, or None
        self._warm_feeds: dict[str, np.ndarray] | None = None  # the last call's feeds (warm-up of a new engine)

    # -- serving -------------------------------------------------------------
    def open(self, backend: str | None = None, precision: Precision | str | None = None) -> OpenResult:
        """Open the first engine synchronously (before the pipeline starts).

        Raises:
            ModelLoadError: not even the reference engine loads.
        """
        result = self.manager.open_engine(self.model_path, backend, precision, card=self.card)
        stream = self._derive(result.runner) if self._streaming else None
        with self._lock:
            old, self._active, self._result = self._active, result.runner, result
            old_stream, self._stream = self._stream, stream
        if old_stream is not None:
            old_stream.close()
        if old is not None:
            old.close()
        return result

    # -- conv-state streaming ------------------------------------------------
    def enable_conv_state(self):
        """Serve the model's conv-state graph beside every engine from now on; the active one's now.

        Derived (:func:`~avatar_app.inference.conv_state.derive_conv_state`, ~0.1-0.2 s) on
        the calling thread for the active engine, and on the worker thread for each engine a
        later request opens, before it is swapped in. Only ONNX Runtime CPU FP32 engines get
        one; a failed derivation is logged as a warning and leaves :attr:`conv_state` None.

        Returns:
            :attr:`conv_state`.
        """
        if self._streaming:
            return self._stream
        self._streaming = True
        runner = self._active
        stream = self._derive(runner) if runner is not None else None
        with self._lock:
            if stream is not None and self._active is runner and self._stream is None:
                self._stream, stream = stream, None
        if stream is not None:  # swapped meanwhile: that engine got its own
            stream.close()
        return self._stream

    @property
    def conv_state(self):
        """The :class:`~avatar_app.inference.conv_state.ConvStateEngine` of the active engine, or None."""
        return self._stream

    def step_with(self, stream, features: np.ndarray, state: Mapping[str, np.ndarray]):
        """One conv-state call, if ``stream`` is still the active engine's (else None: it was swapped).

        Args:
            stream: the :attr:`conv_state` the caller's ``state`` belongs to.
            features, state: see :meth:`ConvStateEngine.step`.

        Returns:
            (outputs, new state, the runner the graph was derived from), or None.
        """
        with self._lock:
            if stream is None or stream is not self._stream:
                return None
            y, new_state = stream.step(features, state)
            self._warm_feeds = {stream.feature_input: features}
            return y, new_state, stream.source

    def _derive(self, runner: BaseRunner):
        from avatar_app.inference.conv_state import derive_conv_state

        if runner.backend != "ort_cpu" or runner.precision is not Precision.FP32:
            logger.info("%s: no conv-state graph (derived for ONNX Runtime CPU FP32 only); the window "
                        "call serves", runner.describe())
            return None
        try:
            return derive_conv_state(runner)
        except AvatarError as exc:
            logger.warning("%s: no conv-state streaming (%s); the network runs over its receptive "
                           "field at every call", runner.describe(), exc)
            return None

    @property
    def active(self) -> BaseRunner:
        """The engine serving now.

        Raises:
            ModelLoadError: the slot was never opened, or is closed.
        """
        runner = self._active
        if runner is None:
            raise ModelLoadError(f"engine slot of {self.model_path.name} is not open")
        return runner

    @property
    def result(self) -> OpenResult | None:
        """The :class:`OpenResult` of the serving engine (attempts and their reasons)."""
        return self._result

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the active engine once (see :meth:`BaseRunner.infer`)."""
        return self.infer_with(feeds)[0]

    def infer_with(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], BaseRunner]:
        """Run the active engine and also return which engine served the call."""
        with self._lock:
            runner = self.active
            out = runner.infer(feeds)
            self._warm_feeds = feeds
            return out, runner

    # -- swapping ------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """Whether a requested engine is still being built."""
        return self._pending > 0

    def request(self, backend: str | None = None, precision: Precision | str | None = None) -> Future:
        """Build/verify/open the engine for (backend, precision) in the background, then swap.

        A later request supersedes an earlier one: a queued request is skipped,
        one still building is closed unused when it finishes (its build stays cached).

        Returns:
            A Future resolving to the :class:`OpenResult` swapped in, or to None when
            superseded; it raises the build error if even the fallbacks failed.
        """
        with self._lock:
            self._generation += 1
            gen = self._generation
            self._pending += 1
        return self._pool.submit(self._build_and_swap, gen, backend, precision)

    def _build_and_swap(self, gen: int, backend, precision) -> OpenResult | None:
        try:
            if gen != self._generation:  # a newer request is queued: skip this one unbuilt
                return None
            try:
                result = self.manager.open_engine(self.model_path, backend, precision, card=self.card)
                stream = self._derive(result.runner) if self._streaming else None
                self._warm_up(result.runner)
            except AvatarError as exc:
                logger.error("engine request %s/%s for %s failed; keeping %s: %s", backend, precision,
                             self.model_path.name, self._active.describe() if self._active else "none", exc)
                self.last_error = exc
                if self.on_change:
                    self.on_change(None, exc)
                raise
            with self._lock:
                if gen != self._generation or self._active is None:
                    superseded = True
                else:
                    superseded = False
                    old, self._active, self._result = self._active, result.runner, result
                    stream, self._stream = self._stream, stream  # (now the old one, to close)
                    self.swaps += 1
            if stream is not None:
                stream.close()
            if superseded:
                result.runner.close()
                return None
            if old is not None and old is not result.runner:
                old.close()
            logger.info("engine of %s swapped to %s", self.model_path.name, result.runner.describe())
            self.last_error = None
            if self.on_change:
                self.on_change(result, None)
            return result
        finally:
            with self._lock:
                self._pending -= 1

    def _warm_up(self, runner: BaseRunner) -> None:
        """One call of a new engine on this (worker) thread before it is swapped in, with the feeds of the
        serving engine's last call: the first run of a session allocates its buffers (ONNX Runtime CPU
        INT8 speech engine: ~7 ms against ~1.5 ms for the next calls), which would otherwise land on the
        processing thread's first frame after the swap. Skipped before any call; a failure (feeds the new
        engine does not take, e.g. a conv-state step's) is logged and the swap goes on."""
        feeds = self._warm_feeds
        if feeds is None:
            return
        try:
            runner.infer(feeds)
        except Exception as exc:  # noqa: BLE001 - a warm-up only; the engine was verified
            logger.debug("warm-up of %s skipped: %s", runner.describe(), exc)

    def close(self) -> None:
        """Stop the worker (waiting for a running build) and close the active engine."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            runner, self._active = self._active, None
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        if runner is not None:
            runner.close()

    def __enter__(self) -> "EngineSlot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
