"""One monotonic process clock and per-stage timing.

All live timestamps are ``time.perf_counter_ns()`` (integer nanoseconds) of
this process; files use media time in seconds.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, MutableMapping

now_ns = time.perf_counter_ns


@contextlib.contextmanager
def stage_timer(stamps: MutableMapping[str, tuple[int, int]], name: str) -> Iterator[None]:
    """Record ``(start_ns, end_ns)`` of a stage into ``stamps[name]``.

    Args:
        stamps: the per-frame stamp record (:data:`avatar_app.core.types.StageStamps`).
        name: stage name, e.g. ``"track"``, ``"reconstruct"``, ``"render"``.
    """
    start = now_ns()
    try:
        yield
    finally:
        stamps[name] = (start, now_ns())
