"""One monotonic process clock and per-stage timing.

All live timestamps are ``time.perf_counter_ns()`` (integer nanoseconds) of
this process; files use media time in seconds.
"""
from __future__ import annotations

import time
from collections.abc import MutableMapping

now_ns = time.perf_counter_ns


class stage_timer:  # noqa: N801 - used as a function: ``with stage_timer(stamps, name):``
    """Record ``(start_ns, end_ns)`` of a stage into ``stamps[name]`` (also when the stage raises).

    A context manager class rather than a ``contextlib`` generator: ~1 us a stage instead
    of ~3 (five stages a frame).

    Args:
        stamps: the per-frame stamp record (:data:`avatar_app.core.types.StageStamps`).
        name: stage name, e.g. ``"track"``, ``"reconstruct"``, ``"render"``.
    """

    __slots__ = ("stamps", "name", "start")

    def __init__(self, stamps: MutableMapping[str, tuple[int, int]], name: str) -> None:
        self.stamps, self.name = stamps, name
        self.start = 0

    def __enter__(self) -> None:
        self.start = now_ns()

    def __exit__(self, *exc) -> None:
        self.stamps[self.name] = (self.start, now_ns())
