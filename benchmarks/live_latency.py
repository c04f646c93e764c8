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
(``during_build``), beside the frames after it.

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
    build = {}
    if args.int8_build:
        fut = engines.request("speech2face", "ort_cpu", "int8")
        build["requested_ns"] = time.perf_counter_ns()
        if fut is None:
            build["error"] = "the speech engine is not open"
        else:
            fut.add_done_callback(lambda f: build.setdefault("done_ns", time.perf_counter_ns()))
    _spin(app, args.seconds)
    measuring[0] = False
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
    }
    if args.int8_build:
        done = build.get("done_ns")
        during = [f for f in frames if done is None or f[0] <= done]
        after = [f for f in frames if done is not None and f[0] > done]
        doc["build"] = {"engine": "speech2face", "backend": "ort_cpu", "precision": "int8",
                        "seconds": round((done - build["requested_ns"]) / 1e9, 1) if done else None,
                        "finished": done is not None, "error": build.get("error") or engines.entry("speech2face").error,
                        "serving": engines.describe("speech2face")}
        d_s = ((done or t1) - t0) / 1e9
        doc["during_build"] = summarise(during, d_s)
        doc["after_build"] = summarise(after, (t1 - done) / 1e9) if done and after else None
    if args.record:
        doc["recording"] = record_clip(app, win, tmp, args.record)
    win.close()
    engines.close()
    return doc


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
