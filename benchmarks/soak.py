"""Soak: the studio window playing a looping file for a long time; memory, fps and latency over time.

Usage (repository root; run alone for the figures; the bar is a 30 minute run)::

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--interval 10] [--out PATH]

Opens the studio window as benchmarks/live_latency.py does (default window size,
under Xvfb when ``$DISPLAY`` is unset, the 30 fps 640x480 GRID clip looping with
its audio driving speech, a fresh settings file and engine cache), plays it for
``--warmup`` seconds, then for ``--minutes`` takes one sample every ``--interval``
seconds: resident memory (``VmRSS``, MB), frames presented per second,
camera-to-screen p50 / p95 of the frames presented in the interval (ms), the
window's drop counter, and the process's CPU share of one core.

Summary: RSS growth (mean of the last quarter of samples minus the mean of the
first quarter, MB, and the least-squares slope in MB per hour), and fps and
camera-to-screen p50 of the last quarter against the first (ratios), with issue
18's bars beside them (RSS growth <= 20 MB; end within 10 % of the start).
Writes JSON (default benchmarks/results/soak.json) and a PNG plot beside it
(same name, .png), and prints where.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from live_latency import ROOT, _spin, open_studio  # noqa: E402 (a sibling script, not a package)

#: Issue 18's soak bars.
RSS_GROWTH_BAR_MB = 20.0
END_WITHIN = 0.10


def rss_mb() -> float:
    """This process's resident set size, MB (``/proc/self/status`` VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def summary(samples: list[dict]) -> dict:
    """RSS growth and start/end comparison over the samples (see the module docstring)."""
    n = len(samples)
    q = max(1, n // 4)
    first, last = samples[:q], samples[-q:]

    def mean(rows, key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return float(np.mean(vals)) if vals else None

    out = {"samples": n, "quarter": q}
    rss0, rss1 = mean(first, "rss_mb"), mean(last, "rss_mb")
    out["rss_growth_mb"] = round(rss1 - rss0, 2) if rss0 is not None else None
    if n >= 2:
        t = np.array([r["t_s"] for r in samples]) / 3600.0
        out["rss_slope_mb_per_hour"] = round(float(np.polyfit(t, [r["rss_mb"] for r in samples], 1)[0]), 2)
    for key in ("fps", "c2s_p50_ms", "c2s_p95_ms"):
        a, b = mean(first, key), mean(last, key)
        out[key] = {"start": None if a is None else round(a, 2), "end": None if b is None else round(b, 2),
                    "end_over_start": round(b / a, 3) if a and b is not None else None}
    out["bars"] = {
        "rss_growth_le_20mb": None if out["rss_growth_mb"] is None else out["rss_growth_mb"] <= RSS_GROWTH_BAR_MB,
        "fps_end_within_10pct": _within(out["fps"]["end_over_start"]),
        "c2s_end_within_10pct": _within(out["c2s_p50_ms"]["end_over_start"]),
    }
    return out


def _within(ratio: float | None) -> bool | None:
    return None if ratio is None else abs(ratio - 1.0) <= END_WITHIN


def plot(samples: list[dict], path: Path, title: str) -> bool:
    """RSS, fps and camera-to-screen over time as a PNG; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    t = np.array([s["t_s"] for s in samples]) / 60.0
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(t, [s["rss_mb"] for s in samples], color="#0072b2")
    axes[0].set_ylabel("RSS (MB)")
    axes[1].plot(t, [s["fps"] for s in samples], color="#009e73")
    axes[1].set_ylabel("fps")
    axes[2].plot(t, [s["c2s_p50_ms"] for s in samples], label="p50", color="#d55e00")
    axes[2].plot(t, [s["c2s_p95_ms"] for s in samples], label="p95", color="#cc79a7")
    axes[2].set_ylabel("camera-to-screen (ms)")
    axes[2].set_xlabel("minutes")
    axes[2].legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def soak(args, tmp: Path) -> dict:
    """Open the window, warm up, sample every interval for the run; returns the JSON document."""
    app, win, engines, source = open_studio(args, tmp)
    c2s: list[float] = []

    def on_presented(state, t_ns):
        if state is not None and state.stamps:
            c2s.append((t_ns - state.t_capture_ns) / 1e6)

    win.viewport.frame_presented.connect(on_presented)
    _spin(app, 60.0, lambda: win.session.pipeline is not None and win.session.pipeline.stats.presented > 0)
    _spin(app, args.warmup)
    pipe = win.session.pipeline
    if pipe is None or not pipe.running:
        raise SystemExit(f"the studio did not start playing {source}: {getattr(pipe, 'error', '')}")
    samples = []
    t_start = time.perf_counter()
    end = t_start + 60.0 * args.minutes
    c2s.clear()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu_prev, t_prev = ru.ru_utime + ru.ru_stime, t_start
    while time.perf_counter() < end:
        _spin(app, min(args.interval, end - time.perf_counter()))
        now = time.perf_counter()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ru.ru_utime + ru.ru_stime
        taken, c2s[:] = list(c2s), []
        dt = now - t_prev
        row = {"t_s": round(now - t_start, 1), "rss_mb": round(rss_mb(), 2),
               "fps": round(len(taken) / dt, 2) if dt > 0 else None,
               "c2s_p50_ms": round(float(np.percentile(taken, 50)), 2) if taken else None,
               "c2s_p95_ms": round(float(np.percentile(taken, 95)), 2) if taken else None,
               "dropped_total": int(pipe.stats.dropped), "cpu_share": round((cpu - cpu_prev) / dt, 3) if dt else None,
               "running": bool(pipe.running)}
        samples.append(row)
        cpu_prev, t_prev = cpu, now
        print(f"{row['t_s']:7.0f} s  RSS {row['rss_mb']:7.1f} MB  {row['fps']} fps  "
              f"c2s {row['c2s_p50_ms']} / {row['c2s_p95_ms']} ms", flush=True)
    doc = {"what": "studio window under Xvfb, 30 fps 640x480 GRID clip looping, default window size",
           "minutes": args.minutes, "interval_s": args.interval, "warmup_s": args.warmup,
           "machine": {"cpus": os.cpu_count(), "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
           "note": args.note, "summary": summary(samples), "samples": samples}
    win.close()
    engines.close()
    return doc


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="soak length, minutes (default 30)")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds played before sampling (default 10)")
    ap.add_argument("--source", type=Path, default=None, help="a video to loop instead of the GRID clip")
    ap.add_argument("--testdata", type=Path,
                    default=Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata")))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak.json")
    ap.add_argument("--note", default="", help="recorded with the results")
    args = ap.parse_args(argv)
    if not os.environ.get("DISPLAY") and not os.environ.get("AVATAR_BENCH_IN_XVFB"):
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", sys.executable, __file__, *(argv or sys.argv[1:])]
        return subprocess.run(cmd, env=dict(os.environ, AVATAR_BENCH_IN_XVFB="1")).returncode
    with tempfile.TemporaryDirectory(prefix="soak_") as tmp:
        doc = soak(args, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    png = args.out.with_suffix(".png")
    s = doc["summary"]
    plotted = plot(doc["samples"], png, f"soak {args.minutes:g} min: RSS growth {s['rss_growth_mb']} MB")
    print(f"RSS growth {s['rss_growth_mb']} MB ({s.get('rss_slope_mb_per_hour')} MB/h), fps end/start "
          f"{s['fps']['end_over_start']}, camera-to-screen p50 end/start {s['c2s_p50_ms']['end_over_start']}")
    print(f"wrote {args.out}" + (f" and {png}" if plotted else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
