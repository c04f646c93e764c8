"""Opt-in pytest plugin: the CPU seconds each test costs, for making the suite cheaper (issue 18).

Wall times (``--durations``) say little on a shared machine: a test that waits is slow under load and
costs nothing, and one that computes costs the same CPU however busy the machine is. This plugin writes
one line per test: node id, wall seconds, CPU seconds of the test process (all its threads) and CPU
seconds of the child processes it waited for (subprocess.run, Popen.wait), setup + call + teardown.

Use (from the checkout's root)::

    AVATAR_TEST_CPU_TSV=/tmp/cpu PYTHONPATH=$PWD python -m pytest -p tests.cpu_time ...
    sort -t$'\\t' -k3,3 -gr /tmp/cpu.*    # the costliest tests first

Each process writes ``$AVATAR_TEST_CPU_TSV.<worker>`` (``gw0``, ``gw1`` under pytest-xdist, ``main``
without it) at the end of the session. Without the variable the plugin records nothing. A child process
killed and never waited for (a server stopped with SIGKILL) is not counted.
"""
from __future__ import annotations

import os
import time

import pytest

_rows: list[tuple[str, float, float, float]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Measure one test's setup, call and teardown together."""
    if not os.environ.get("AVATAR_TEST_CPU_TSV"):
        yield
        return
    t0, w0 = os.times(), time.perf_counter()
    yield
    t1, w1 = os.times(), time.perf_counter()
    own = (t1.user - t0.user) + (t1.system - t0.system)
    children = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
    _rows.append((item.nodeid, w1 - w0, own, children))


def pytest_sessionfinish(session):
    """Write this process's lines (node id, wall s, own CPU s, children's CPU s; tab-separated)."""
    out = os.environ.get("AVATAR_TEST_CPU_TSV")
    if not out or not _rows:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{out}.{worker}", "w", encoding="utf-8") as f:
        for nodeid, wall, own, children in _rows:
            f.write(f"{nodeid}\t{wall:.2f}\t{own + children:.2f}\t{own:.2f}\t{children:.2f}\n")
