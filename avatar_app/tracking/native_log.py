"""Keep MediaPipe's native start-up chatter off the user's terminal.

MediaPipe's C++ graphs print absl/glog warnings straight to file descriptor 2
while a graph starts and on its first frames ("Feedback manager requires a
model with a single signature inference ..."), before absl logging can be
configured. They are harmless but look like errors to a user. This module
redirects fd 2 into a temporary file around those calls and forwards what was
captured to the Python logger at DEBUG.
"""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)
_lock = threading.Lock()


@contextlib.contextmanager
def native_stderr_to_log() -> Iterator[None]:
    """Redirect fd 2 to a temporary file for the duration; log the captured text at DEBUG.

    Thread: process-wide (file descriptors are shared); held only for graph
    start-up and the first frames, a few tens of milliseconds.
    """
    with _lock:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all (frozen GUI app): nothing to hide
            yield
            return
        with tempfile.TemporaryFile(mode="w+b") as tmp:
            try:
                os.dup2(tmp.fileno(), 2)
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                text = tmp.read().decode("utf-8", "replace").strip()
                if text:
                    log.debug("MediaPipe native log:\n%s", text)


class QuietGraph:
    """Wraps a MediaPipe solution so its start-up and first ``quiet_calls`` process() calls are quiet.

    Args:
        factory: zero-argument callable creating the solution (e.g. a FaceMesh).
        quiet_calls: how many first ``process`` calls to run with native stderr captured.
    """

    def __init__(self, factory, quiet_calls: int = 2):
        import numpy as np

        with native_stderr_to_log():
            self._graph = factory()
            # The graph starts its calculators asynchronously; one warm-up frame makes
            # them finish (and print) while stderr is still captured. A blank frame
            # finds no face, so it leaves no tracking state behind.
            self._graph.process(np.zeros((64, 64, 3), np.uint8))
        self._quiet_left = quiet_calls

    def process(self, image):
        """``graph.process(image)``; see MediaPipe's solution API."""
        if self._quiet_left > 0:
            self._quiet_left -= 1
            with native_stderr_to_log():
                return self._graph.process(image)
        return self._graph.process(image)

    def close(self) -> None:
        """Close the wrapped graph."""
        self._graph.close()
