"""Live latency of the studio window: camera-to-screen, fps, drops and CPU time per frame and per stage.

Usage (repository root; run alone, on a quiet machine, for the figures)::

    .venv/bin/python benchmarks/live_latency.py [--seconds 60] [--int8-build] [--out PATH]

Opens the studio window (``MainWindow``, the default 1440x900 window, panels as a
new user sees them) under Xvfb (started here when ``$DISPLAY`` is unset) on a
30 fps 640x480 file source made from the GRID clip of ../shared/testdata (looping,
its audio driving speech), waits ``--warmup`` seconds, then measures for
``--seconds``:

- camera-to-screen per presented frame (the frame's capture on the process clock
  to the paint that showed it), p50 / p95 / max, ms;
- fps (frames presented per second) and drops (the window's one drop counter,
  ``LatencyStats.dropped``: camera frames the viewer never saw);
- where camera-to-screen goes, per frame (p50 / p95 ms): each pipeline stage
  (``capture``, ``queue``, ``track``, ...), ``to_render`` (last pipeline stage to the
  render thread starting it: the hand-off, a render still running), ``render`` and
  ``to_screen`` (render done to painted), split into ``handoff`` (the render thread wraps
  the pixels and signals), ``to_gui`` (the queued signal waits for the GUI thread: its
  other work, the GIL) and ``paint``;
- ``tail_ms``: the mean of each of those over the slowest 5 % of frames (camera-to-screen
  at or above its p95) beside the mean over all frames: the part that grows in the tail;
- CPU time per presented frame: the whole process, and per thread (pipeline, render
  thread, GUI thread, llvmpipe rasterisers, decoder, ...), ms of CPU per frame.

``--record SECONDS`` records a clip from the window (as the Record button does) for
that long after the measured run and reports it under ``recording``: frames the
viewport presented meanwhile, frames placed in the clip (distinct: each presented
frame at most once), repeats, held slots, frames lost, and the bar's ratio
``distinct_over_presented`` (issue 18: >= 0.95 over 20 s of a 30 fps source).

``--int8-build`` starts an INT8 build of the speech engine on ONNX Runtime CPU
(calibration and quantisation in the background child, a fresh engine cache) after
the warm-up and reports the frames presented while it ran separately
(``during_build``), beside the frames after it. ``--builds N`` runs N fresh builds one
after the other (the engine cache and calibrated file emptied; ``--build-gap`` seconds after
each swap a switch back to FP32, as long again before the next build), so frames during
builds and frames outside them come from the same run under the same machine load;
``build_diagnostics`` splits them by phase (the child working; the parent from the child's
end to the swap; the first second after the swap; outside the builds) with per-stage p50 /
p95, by progress stage, and gives the parent's CPU time per thread during the builds (the
engine slot's ``engine-swap-*`` and the controller's ``engines`` threads are Python: their
CPU time is GIL time taken from the pipeline and render threads) and the children's CPU
time. ``windows_5s``: camera-to-screen and render per 5 s of the run.

Writes JSON (default benchmarks/results/live_latency.json, or
live_latency_int8.json with ``--int8-build``) and prints where.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PIPELINE_STAGES_END = ("fuse", "post", "speech", "reconstruct", "track")


def make_source(testdata: Path, out: Path) -> Path:
    """The GRID clip at 640x480 and 30 fps, four times over (12 s, looped by the window)."""
    clip = testdata / "video" / "grid_s1_bbaf2n.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "3", "-i", str(clip),
                    "-vf", "scale=640:480,fps=30", "-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", str(out)], check=True)
    return out


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process, by thread name (summed over same names).

    Python threads by their ``threading`` name, native ones by their kernel name
    (``/proc/self/task/<tid>/comm``: llvmpipe-0, QXcbEventQueue, ...).
    """
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        name = names.get(int(tid), comm)
        if name.startswith("llvmpipe"):
            name = "llvmpipe (all)"
        out[name] = out.get(name, 0.0) + cpu
    return out


def _pct(values) -> dict:
    a = np.asarray(list(values), np.float64)
    if a.size == 0:
        return {"n": 0}
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 2),
            "p95": round(float(np.percentile(a, 95)), 2), "max": round(float(a.max()), 2),
            "mean": round(float(a.mean()), 2)}


def frame_breakdown(state, t_present_ns: int, present_ns: tuple[int, int, int] | None = None) -> dict[str, float]:
    """Where one frame's camera-to-screen went, ms (see the module docstring).

    ``present_ns``: the viewport's ``present_ns`` for this frame (handed over by the render
    thread, reached the GUI thread, painted), which splits ``to_screen`` into ``handoff``,
    ``to_gui`` and ``paint``.
    """
    st = state.stamps
    out = {k: (e - s) / 1e6 for k, (s, e) in st.items()}
    pipe_end = max((e for k, (s, e) in st.items() if k != "render"), default=None)
    if "render" in st and pipe_end is not None:
        r0, r1 = st["render"]
        out["to_render"] = (r0 - pipe_end) / 1e6
        out["to_screen"] = (t_present_ns - r1) / 1e6
        if present_ns is not None and present_ns[2] == t_present_ns:
            handed, slot, _ = present_ns
            out["handoff"] = (handed - r1) / 1e6
            out["to_gui"] = (slot - handed) / 1e6
            out["paint"] = (t_present_ns - slot) / 1e6
    out["camera_to_screen"] = (t_present_ns - state.t_capture_ns) / 1e6
    return out


def summarise(frames: list[tuple[int, dict]], seconds: float, cpu_ms: dict | None = None) -> dict:
    """Figures of the frames presented in one phase."""
    keys: list[str] = []
    for _, b in frames:
        keys += [k for k in b if k not in keys]
    out = {"frames": len(frames), "fps": round(len(frames) / seconds, 2) if seconds > 0 else None,
           "camera_to_screen_ms": _pct(b["camera_to_screen"] for _, b in frames),
           "stages_ms": {k: _pct(b[k] for _, b in frames if k in b) for k in keys if k != "camera_to_screen"}}
    out["tail_ms"] = tail_breakdown([b for _, b in frames], keys)
    if cpu_ms is not None:
        out["cpu_ms_per_frame"] = cpu_ms
    return out


def tail_breakdown(frames: list[dict], keys: list[str]) -> dict:
    """Where the slowest 5 % went: the mean of every stage over the frames whose camera-to-screen
    is at or above its p95 (ms), beside the same means over all frames (``all``), so the stage
    that grows in the tail shows."""
    if not frames:
        return {}
    c2s = np.array([b["camera_to_screen"] for b in frames])
    cut = float(np.percentile(c2s, 95))
    tail = [b for b in frames if b["camera_to_screen"] >= cut]

    def means(rows):
        return {k: round(float(np.mean([b[k] for b in rows if k in b])), 2) for k in keys
                if any(k in b for b in rows)}
    return {"frames": len(tail), "from_ms": round(cut, 2), "tail": means(tail), "all": means(frames)}


def _spin(app, seconds: float, until=None) -> None:
    """Run the Qt event loop for ``seconds`` (or until ``until()`` is true, polled every 20 ms).

    A real ``QEventLoop``, as the studio runs (``app.exec()``): the GUI thread sleeps in
    the event loop between events, not in a ``processEvents``/``sleep`` polling loop that
    would add up to a poll period to every frame's ``to_gui``.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(max(0, int(seconds * 1000)), loop.quit)
    poll = None
    if until is not None:
        if until():
            return
        poll = QTimer()
        poll.setInterval(20)
        poll.timeout.connect(lambda: until() and loop.quit())
        poll.start()
    loop.exec()
    if poll is not None:
        poll.stop()


def open_studio(args, tmp: Path):
    """The studio window on ``args.source`` (or the looping GRID file), with its caches, settings and
    recordings under ``tmp``, shown at the default size; returns ``(app, window, engines, source)``."""
    os.environ.setdefault("AVATAR_APP_CACHE_DIR", str(tmp / "cache"))
    os.environ.setdefault("AVATAR_APP_DATA_DIR", str(tmp / "data"))
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from avatar_app.inference import EngineCache
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    source = args.source or make_source(args.testdata, tmp / "grid_640x480_30fps.mp4")
    app = QApplication.instance() or QApplication([])
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("record_folder", str(tmp / "recordings"))
    engines = EngineController(isolate=True, cache=EngineCache(tmp / "engine_cache"),
                               calibration_root=tmp / "calibration")
    win = MainWindow(source=source, settings=settings, engines=engines)
    win.show()
    return app, win, engines, source


def measure(args, tmp: Path) -> dict:
    """Open the window, warm up, measure; returns the JSON document."""
    app, win, engines, source = open_studio(args, tmp)
    frames: list[tuple[int, dict]] = []
    measuring = [False]

    def on_presented(state, t_ns):
        if measuring[0] and state is not None and state.stamps:
            frames.append((t_ns, frame_breakdown(state, t_ns, getattr(win.viewport, "present_ns", None))))

    win.viewport.frame_presented.connect(on_presented)
    _spin(app, 60.0, lambda: win.session.pipeline is not None and win.session.pipeline.stats.presented > 0)
    _spin(app, args.warmup)
    pipe = win.session.pipeline
    if pipe is None or not pipe.running:
        raise SystemExit(f"the studio did not start playing {source}: {getattr(pipe, 'error', '')}")
    dropped0, presented0 = pipe.stats.dropped, pipe.stats.presented
    paint0 = getattr(win.viewport, "paint_cpu_ns", 0)
    cpu0, ru0, t0 = thread_cpu_s(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter_ns()
    measuring[0] = True
    builds: list[dict] = []
    driver = None
    if args.int8_build:
        driver = BuildDriver(engines, tmp, builds, count=args.builds, gap_s=args.build_gap)
        driver.start()
    _spin(app, args.seconds)
    measuring[0] = False
    if driver is not None:
        driver.stop()
    t1, cpu1, ru1 = time.perf_counter_ns(), thread_cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
    dropped, presented = pipe.stats.dropped - dropped0, pipe.stats.presented - presented0
    span_s = (t1 - t0) / 1e9
    n = max(1, len(frames))
    per_thread = {k: round(1000 * (cpu1[k] - cpu0.get(k, 0.0)) / n, 2) for k in cpu1
                  if cpu1[k] - cpu0.get(k, 0.0) > 0.005 * span_s}
    process_cpu_s = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    cpu_ms = {"process": round(1000 * process_cpu_s / n, 2),
              "viewport_paint": round((getattr(win.viewport, "paint_cpu_ns", 0) - paint0) / 1e6 / n, 2),
              "threads": dict(sorted(per_thread.items(), key=lambda kv: -kv[1]))}
    doc = {
        "what": "studio window under Xvfb, 30 fps 640x480 file source (GRID clip, looping), default window size",
        "seconds": round(span_s, 1), "warmup_s": args.warmup,
        "window_size": [win.width(), win.height()],
        "viewport_px": [win.viewport.width(), win.viewport.height(), win.viewport.devicePixelRatioF()],
        "drops": int(dropped), "presented_by_stats": int(presented),
        "process_cpu_share_of_one_core": round(process_cpu_s / span_s, 3),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
                    "platform": platform.platform(), "python": platform.python_version()},
        "note": args.note,
        **summarise(frames, span_s, cpu_ms),
        "windows_5s": time_windows(frames, t0, 5.0),
    }
    if args.int8_build:
        build = builds[0] if builds else {"error": "no build started"}
        done = build.get("done_ns")
        windows = [(b["requested_ns"], b.get("done_ns") or t1) for b in builds if "requested_ns" in b]
        during = [f for f in frames if any(a < f[0] <= b for a, b in windows)]
        after = [f for f in frames if done is not None and f[0] > done and f not in during]
        doc["build"] = {"engine": "speech2face", "backend": "ort_cpu", "precision": "int8",
                        "seconds": round((done - build["requested_ns"]) / 1e9, 1) if done else None,
                        "finished": done is not None, "error": build.get("error") or engines.entry("speech2face").error,
                        "serving": engines.describe("speech2face"), "builds": len(builds),
                        "seconds_each": [round((b["done_ns"] - b["requested_ns"]) / 1e9, 2)
                                         for b in builds if b.get("done_ns")]}
        d_s = sum(b - a for a, b in windows) / 1e9
        doc["during_build"] = summarise(during, d_s)
        doc["after_build"] = summarise(after, (t1 - done) / 1e9) if done and after else None
        doc["build_diagnostics"] = build_diagnostics(builds, frames, t0, t1)
    if args.record:
        doc["recording"] = record_clip(app, win, tmp, args.record)
    win.close()
    engines.close()
    return doc


def time_windows(frames: list[tuple[int, dict]], t0_ns: int, width_s: float) -> list[dict]:
    """Camera-to-screen and render p50 / p95 (ms) of the frames presented in each ``width_s`` window
    from the measurement's start: what changes over the run (a slow start, a build, other work)."""
    out = []
    if not frames:
        return out
    n = int((frames[-1][0] - t0_ns) / (width_s * 1e9)) + 1
    for i in range(n):
        a, b = t0_ns + int(i * width_s * 1e9), t0_ns + int((i + 1) * width_s * 1e9)
        sel = [f for f in frames if a < f[0] <= b]
        c2s, render = _pct(f["camera_to_screen"] for _, f in sel), _pct(f["render"] for _, f in sel if "render" in f)
        out.append({"from_s": round(i * width_s, 1), "frames": len(sel), "c2s_p50": c2s.get("p50"),
                    "c2s_p95": c2s.get("p95"), "render_p50": render.get("p50"), "render_p95": render.get("p95")})
    return out


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's waited-for children (the build child, once joined)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class BuildDriver:
    """Runs ``count`` INT8 builds of the speech engine one after the other while the window plays, from a
    GUI-thread timer: a fresh build (the engine cache emptied), then ``gap_s`` after its swap a switch
    back to the FP32 reference, ``gap_s`` later the next build. Each build's record (in ``builds``):
    ``requested_ns``, ``done_ns`` (swapped), ``child_end_ns`` (``EngineManager.build`` returned: the
    child's job is over, the parent opens the engine), ``progress`` ((t_ns, stage) of each report),
    per-thread CPU at request and at swap, and the revert's window (``revert_ns``)."""

    def __init__(self, engines, tmp: Path, builds: list[dict], count: int = 1, gap_s: float = 5.0):
        from PySide6.QtCore import QTimer

        self.engines, self.tmp, self.builds, self.count, self.gap_s = engines, tmp, builds, count, gap_s
        self.state, self.next_ns, self.current = "start", 0, None
        engines.progress.connect(self._on_progress)
        mgr = engines.manager
        inner = mgr.build

        def timed_build(*a, **kw):
            try:
                return inner(*a, **kw)
            finally:
                if self.current is not None:
                    self.current.setdefault("child_end_ns", time.perf_counter_ns())
        mgr.build = timed_build
        self.timer = QTimer()
        self.timer.setInterval(50)
        self.timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._tick()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def _on_progress(self, _path, stage, _fraction) -> None:
        cur = self.current
        if cur is not None and "done_ns" not in cur:
            cur["progress"].append((time.perf_counter_ns(), stage))

    def _tick(self) -> None:
        import shutil

        now = time.perf_counter_ns()
        cur = self.current
        if self.state == "start" or (self.state == "idle" and now >= self.next_ns):
            if len(self.builds) >= self.count:
                self.state = "finished"
                return
            for sub in ("engines", "onnx"):  # the built engine and the calibrated QDQ file: calibrate again
                shutil.rmtree(self.tmp / "engine_cache" / sub, ignore_errors=True)
            cur = self.current = {"progress": [], "cpu0": thread_cpu_s(), "children0": _children_cpu_s()}
            self.builds.append(cur)
            fut = self.engines.request("speech2face", "ort_cpu", "int8")
            cur["requested_ns"] = time.perf_counter_ns()
            if fut is None:
                cur["error"] = "the speech engine is not open"
                self.state = "finished"
                return

            def on_done(_f, cur=cur):
                cur.setdefault("done_ns", time.perf_counter_ns())
                cur.setdefault("cpu1", thread_cpu_s())
            fut.add_done_callback(on_done)
            self.state = "building"
        elif self.state == "building" and "done_ns" in cur:
            self.state, self.next_ns = "swapped", now + int(self.gap_s * 1e9)
        elif self.state == "swapped" and now >= self.next_ns:
            if len(self.builds) >= self.count:
                self.state = "finished"
                return
            fut = self.engines.request("speech2face", "ort_cpu", "fp32")
            t = time.perf_counter_ns()
            cur["revert_ns"] = [t, None]
            if fut is not None:
                fut.add_done_callback(lambda _f, cur=cur: cur["revert_ns"].__setitem__(1, time.perf_counter_ns()))
            self.state = "reverting"
        elif self.state == "reverting" and cur["revert_ns"][1] is not None:
            self.state, self.next_ns = "idle", now + int(self.gap_s * 1e9)


def build_diagnostics(builds: list[dict], frames: list[tuple[int, dict]], t_start_ns: int, t_end_ns: int) -> dict:
    """Where background builds' cost lands, over all builds of the run: per phase (``child``: the child
    working, up to ``EngineManager.build`` returning; ``parent_after_child``: from there to the swap;
    ``first_second_after_swap``; ``outside_build``: every other frame, reverts excluded) the frames'
    camera-to-screen and per-stage p50 / p95 (ms); per progress stage of each build its frames'
    camera-to-screen and render p95; the parent's CPU time per thread during the builds (ms, summed; the
    Python threads of the engine slot / controller hold the GIL while they run Python) and the children's
    CPU time (s)."""
    sec = 1_000_000_000
    windows: dict[str, list[tuple[int, int]]] = {"child": [], "parent_after_child": [],
                                                 "first_second_after_swap": [], "revert": []}
    stages, cpu_ms, phase_s = [], {}, {}
    for b in builds:
        t0, done = b.get("requested_ns"), b.get("done_ns")
        if t0 is None:
            continue
        child_end = b.get("child_end_ns") or done or t_end_ns
        windows["child"].append((t0, child_end))
        if done:
            windows["parent_after_child"].append((child_end, done))
            windows["first_second_after_swap"].append((done, done + sec))
        rv = b.get("revert_ns")
        if rv:
            windows["revert"].append((rv[0], (rv[1] or t_end_ns) + sec))
        marks = b["progress"]
        for i, (t, stage) in enumerate(marks):
            t_next = marks[i + 1][0] if i + 1 < len(marks) else child_end
            sel = [f for f in frames if t < f[0] <= t_next]
            stages.append({"stage": stage, "at_s": round((t - t0) / 1e9, 3), "s": round((t_next - t) / 1e9, 3),
                           **_phase_stats(sel, brief=True)})
        if b.get("cpu1"):
            for k, v in b["cpu1"].items():
                cpu_ms[k] = cpu_ms.get(k, 0.0) + 1000 * (v - b["cpu0"].get(k, 0.0))
    out: dict = {"phases_s": {}, "phases": {}}
    for name, ws in windows.items():
        phase_s[name] = round(sum(b - a for a, b in ws) / 1e9, 3)
        if name != "revert":
            out["phases"][name] = _phase_stats([f for f in frames if any(a < f[0] <= b for a, b in ws)])
    out["phases_s"] = phase_s
    busy = [w for ws in windows.values() for w in ws]
    out["phases"]["outside_build"] = _phase_stats([f for f in frames if not any(a < f[0] <= b for a, b in busy)])
    out["progress_stages"] = stages
    out["parent_cpu_ms_during_builds"] = dict(sorted(((k, round(v, 1)) for k, v in cpu_ms.items() if v >= 1.0),
                                                     key=lambda kv: -kv[1]))
    out["parent_cpu_ms_during_builds_total"] = round(sum(cpu_ms.values()), 1)
    out["children_cpu_s"] = round(_children_cpu_s() - builds[0].get("children0", 0.0), 2) if builds else None
    return out


def _phase_stats(frames: list[tuple[int, dict]], brief: bool = False) -> dict:
    keys = ("camera_to_screen", "track", "speech", "render", "to_render", "to_gui")
    if brief:
        return {"frames": len(frames), **{k + "_p95": _pct(b[k] for _, b in frames if k in b).get("p95")
                                          for k in ("camera_to_screen", "render")}}
    return {"frames": len(frames), **{k: {q: v for q, v in _pct(b[k] for _, b in frames if k in b).items()
                                          if q in ("p50", "p95")} for k in keys}}


def record_clip(app, win, tmp: Path, seconds: float) -> dict:
    """Record ``seconds`` from the window; what the clip holds against what the viewport presented."""
    presented = [0]

    def on_presented(state, _t):
        if state is not None and state.stamps:
            presented[0] += 1

    ctl = win.recording
    (tmp / "recordings").mkdir(parents=True, exist_ok=True)
    path = ctl.start_recording(tmp / "recordings" / "live_latency.mp4")
    if path is None:
        return {"error": ctl.notifier.last_error or "the recording did not start"}
    win.viewport.frame_presented.connect(on_presented)
    _spin(app, seconds)
    win.viewport.frame_presented.disconnect(on_presented)
    lost = ctl.recording_dropped()
    ctl.stop_recording(wait=True)
    info = ctl.last_record_info
    synced = info.get("synced", {})
    distinct = synced.get("frames_in", 0) - synced.get("frames_dropped", 0)
    return {"seconds": seconds, "presented": presented[0], "distinct_frames_in_clip": distinct,
            "distinct_over_presented": round(distinct / presented[0], 3) if presented[0] else None,
            "lost_after_presentation": int(lost), **synced, "message": ctl.last_record_message,
            "rate_note": ctl.record_rate_warning}


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured time, s (default 60)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds played before measuring (default 5)")
    ap.add_argument("--int8-build", action="store_true", help="build an INT8 speech engine while measuring")
    ap.add_argument("--builds", type=int, default=1,
                    help="with --int8-build: this many fresh INT8 builds one after the other (default 1)")
    ap.add_argument("--build-gap", type=float, default=5.0,
                    help="seconds between a build's swap and the switch back to FP32, and between that and the "
                         "next build (default 5)")
    ap.add_argument("--record", type=float, default=0.0, metavar="SECONDS",
                    help="then record a clip for this long and count its frames (issue 18: 20)")
    ap.add_argument("--source", type=Path, default=None, help="a video to play instead of the GRID clip")
    ap.add_argument("--testdata", type=Path,
                    default=Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata")))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--note", default="", help="recorded with the results (e.g. 'machine loaded by other work')")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = ROOT / "benchmarks" / "results" / ("live_latency_int8.json" if args.int8_build
                                                      else "live_latency.json")
    if not os.environ.get("DISPLAY") and not os.environ.get("AVATAR_BENCH_IN_XVFB"):
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", sys.executable, __file__, *(argv or sys.argv[1:])]
        return subprocess.run(cmd, env=dict(os.environ, AVATAR_BENCH_IN_XVFB="1")).returncode
    with tempfile.TemporaryDirectory(prefix="live_latency_") as tmp:
        doc = measure(args, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    c2s = doc["camera_to_screen_ms"]
    print(f"camera-to-screen p50 {c2s.get('p50')} ms, p95 {c2s.get('p95')} ms, {doc['fps']} fps, "
          f"{doc['drops']} dropped, {doc['cpu_ms_per_frame']['process']} ms CPU per frame")
    rec = doc.get("recording")
    if rec:
        print(f"recording: {rec.get('distinct_frames_in_clip')} distinct frames in the clip for "
              f"{rec.get('presented')} presented ({rec.get('distinct_over_presented')})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
