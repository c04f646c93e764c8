"""Thread count of the BLAS library numpy loaded (OpenBLAS), set at run time.

Why: OpenBLAS's worker threads busy-wait (``sched_yield`` in a loop) for a while
after each call before they sleep. The live pipeline calls BLAS on small
matrices every frame, so with the default of one thread per core the extra
thread never slept: measured in the studio window (benchmarks/live_latency.py, a
30 fps file, 2 cores) one unnamed thread spent 0.3-0.8 of a core in
``sched_yield``; with one BLAS thread it is gone. Small matrices gain nothing
from BLAS threads. ``OPENBLAS_NUM_THREADS`` only works before numpy loads, so
this sets the count through OpenBLAS's own ``openblas_set_num_threads`` (its
``64_``/``scipy_`` suffixed names in numpy's wheels), found among the loaded
libraries (``/proc/self/maps``), as threadpoolctl does.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

#: The user's own OPENBLAS_NUM_THREADS when this module was first imported (then it is left alone).
_USER_VALUE = os.environ.get("OPENBLAS_NUM_THREADS")
_PREFIXES = ("openblas", "scipy_openblas")
_SUFFIXES = ("", "64_")


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux), else []."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))


def _call(lib, name: str, *args):
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            fn = getattr(lib, f"{prefix}_{name}{suffix}", None)
            if fn is not None:
                return fn(*args)
    raise AttributeError(name)


def blas_threads() -> list[int]:
    """Thread counts of the loaded OpenBLAS libraries ([] when none is loaded or readable)."""
    out = []
    for path in _loaded_openblas():
        try:
            out.append(int(_call(ctypes.CDLL(path), "get_num_threads")))
        except (OSError, AttributeError):
            continue
    return out


def limit_blas_threads(n: int = 1) -> int:
    """Cap every loaded OpenBLAS to ``n`` threads (and libraries loaded later, by the environment).

    Args:
        n: threads, >= 1. ``OPENBLAS_NUM_THREADS`` set by the user wins (nothing is changed).

    Returns:
        How many loaded libraries were capped (0 where none is loaded, or not Linux).
    """
    if _USER_VALUE is not None:
        return 0
    n = max(1, int(n))
    os.environ["OPENBLAS_NUM_THREADS"] = str(n)
    if not sys.platform.startswith("linux"):
        return 0
    done = 0
    for path in _loaded_openblas():
        try:
            _call(ctypes.CDLL(path), "set_num_threads", ctypes.c_int(n))
            done += 1
        except (OSError, AttributeError) as exc:
            log.debug("cannot set the thread count of %s: %s", path, exc)
    return done


__all__ = ["blas_threads", "limit_blas_threads"]
