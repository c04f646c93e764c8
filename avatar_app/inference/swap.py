"""Change an engine's backend or precision while the pipeline runs.

:class:`EngineSlot` holds the active engine of one model. ``request(backend,
precision)`` builds, verifies and opens the new engine on a background thread
while the old one keeps serving; the swap happens under the slot's lock, i.e.
between two ``infer`` calls, and only a fully opened, verified engine is ever
put in the slot. A failed request leaves the old engine serving.
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

    # -- serving -------------------------------------------------------------
    def open(self, backend: str | None = None, precision: Precision | str | None = None) -> OpenResult:
        """Open the first engine synchronously (before the pipeline starts).

        Raises:
            ModelLoadError: not even the reference engine loads.
        """
        result = self.manager.open_engine(self.model_path, backend, precision, card=self.card)
        with self._lock:
            old, self._active, self._result = self._active, result.runner, result
        if old is not None:
            old.close()
        return result

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
            return runner.infer(feeds), runner

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
                    self.swaps += 1
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

    def close(self) -> None:
        """Stop the worker (waiting for a running build) and close the active engine."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            runner, self._active = self._active, None
        if runner is not None:
            runner.close()

    def __enter__(self) -> "EngineSlot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
