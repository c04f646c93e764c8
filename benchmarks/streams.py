"""Streams benchmark: how many simulated 30 fps streams one ``avatar-app serve`` holds at p95 <= 33 ms.

Each stream replays the engine inputs of a dev clip (the GRID recordings in
../shared/testdata/video): the face_recon feeds a local render makes from
MediaPipe's landmarks and the speech2face features it makes from the clip's
voice, recorded once through the real solvers and cached. Every 1/30 s a stream
sends its frame's two requests (face_recon and speech2face, concurrently, over
gRPC to Triton, which batches requests of all streams); the end-to-end time of a
frame runs from its scheduled time to both answers, so a stream that falls
behind carries its lag into the next frames. Landmark tracking stays in the
client (as in the app) and is not part of the figure.

The number of streams N doubles until p95 exceeds the budget, then is bisected.
Each level runs ``--seconds`` (the first second is warm-up); the whole run stops
after ``--time-limit`` seconds and at ``--max-streams``. Only loopback addresses
are used: the benchmark starts its own server on free local ports (or uses
``--url grpc://127.0.0.1:PORT``, refusing any other host).

Written with every level: the server's own figures from Triton's Prometheus
metrics (requests, executions, mean batch, queue and compute time per model) and
its statistics extension (executions per batch size: the batch-size histogram).

    python benchmarks/streams.py [--out benchmarks/results/streams_cpu.json] [--seconds 6]

Numbers from a shared machine are noisy: the load average before and after is recorded.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from avatar_app.inference.remote import ACCESS_HEADER, format_url, is_loopback, parse_url, read_session  # noqa: E402

BUDGET_MS = 1000.0 / 30.0
FPS = 30.0
CLIPS = ("grid_s1_bbaf2n.mp4", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4")
MODELS = ("face_recon", "speech2face")


# --------------------------------------------------------------------------- recorded inputs
def record_feeds(clip: Path, work: Path) -> dict[str, list[dict[str, np.ndarray]]]:
    """The engine inputs a local render of ``clip`` makes, in call order, per model (batch 1 each)."""
    from avatar_app.pipeline import RenderOptions, StageChoice, render_file
    from avatar_app.pipeline.stages import build_reconstructor, build_speech
    # the stage factory's engines (the face engine asked for: it is not the default path)
    choice = StageChoice(live=False, audio=True, face="engine")
    recon, speech = build_reconstructor(choice), build_speech(choice)
    calls: dict[str, list] = {m: [] for m in MODELS}
    for name, solver in (("face_recon", recon), ("speech2face", speech)):
        slot = solver.slot
        real = slot.infer

        def spy(feeds, _real=real, _sink=calls[name]):
            _sink.append({k: np.array(v) for k, v in feeds.items()})
            return _real(feeds)

        slot.infer = spy
    render_file(clip, work / f"{clip.stem}.mp4", RenderOptions(size=(64, 64)), reconstructor=recon, speech=speech)
    recon.close(), speech.close()
    return calls


def load_feeds(testdata: Path) -> list[dict[str, list[dict[str, np.ndarray]]]]:
    """Recorded feeds of every clip, cached under the user cache (keyed by the models' SHA-256)."""
    from avatar_app.inference.dirs import user_cache_dir
    from avatar_app.inference.modelinfo import sha256_file
    from avatar_app.resources import resource_path

    key = "-".join(sha256_file(resource_path(f"models/{m}.onnx"))[:8] for m in MODELS)
    cache = user_cache_dir() / "benchmarks" / f"streams-feeds-{key}.npz"
    out = []
    if cache.is_file():
        with np.load(cache) as z:
            for c in range(len(CLIPS)):
                clip = {}
                for m in MODELS:
                    n = int(z[f"{c}/{m}/n"])
                    names = [k.split("/")[-1] for k in z.files if k.startswith(f"{c}/{m}/0/")]
                    clip[m] = [{k: z[f"{c}/{m}/{i}/{k}"] for k in names} for i in range(n)]
                out.append(clip)
        return out
    arrays = {}
    with tempfile.TemporaryDirectory() as work:
        for c, name in enumerate(CLIPS):
            print(f"recording the engine inputs of {name} (once)", flush=True)
            calls = record_feeds(testdata / "video" / name, Path(work))
            out.append(calls)
            for m, seq in calls.items():
                arrays[f"{c}/{m}/n"] = np.array(len(seq))
                for i, feeds in enumerate(seq):
                    for k, v in feeds.items():
                        arrays[f"{c}/{m}/{i}/{k}"] = v
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **arrays)
    return out


# --------------------------------------------------------------------------- the server
def start_server(cache_dir: Path | None, args: list[str]) -> tuple[subprocess.Popen, str, int]:
    """``avatar-app serve`` on free loopback ports; returns (process, gRPC URL, metrics port)."""
    import socket

    socks = [socket.socket() for _ in range(3)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    grpc, http, metrics = (s.getsockname()[1] for s in socks)
    for s in socks:
        s.close()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cache_dir is not None:
        env["AVATAR_APP_CACHE_DIR"] = str(cache_dir)
    cmd = [sys.executable, "-m", "avatar_app", "serve", "--grpc-port", str(grpc), "--http-port", str(http),
           "--metrics-port", str(metrics), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t_end = time.monotonic() + 300
    for line in proc.stdout:
        print(f"  serve: {line.rstrip()}", flush=True)
        if line.startswith("ready"):
            break
        if time.monotonic() > t_end:
            break
    if proc.poll() is not None or time.monotonic() > t_end:
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, format_url("127.0.0.1", grpc), metrics


def scrape(metrics_port: int) -> dict[tuple[str, str], float]:
    """Triton's Prometheus counters: (metric, model) -> value."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^(nv_[a-z_]+)\{model="([^"]+)"[^}]*\} ([0-9.e+-]+)$', text, re.MULTILINE):
        key = (m[1], m[2])
        out[key] = out.get(key, 0.0) + float(m[3])
    return out


def batch_stats(client, token: str | None) -> dict[str, dict[int, int]]:
    """Executions per batch size per model (Triton's statistics extension; needs the access token)."""
    if token is None:
        return {}
    st = client.get_inference_statistics(headers={ACCESS_HEADER: token}, as_json=True)
    return {m["name"]: {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in m.get("batch_stats", [])}
            for m in st.get("model_stats", [])}


def server_figures(before, after, hist0, hist1) -> dict:
    """Per-model deltas of the server's counters over one level."""
    out = {}
    for model in MODELS:
        def d(name, model=model):
            return after.get((name, model), 0.0) - before.get((name, model), 0.0)

        req, inf, execs = d("nv_inference_request_success"), d("nv_inference_count"), d("nv_inference_exec_count")
        h0, h1 = hist0.get(model, {}), hist1.get(model, {})
        hist = {str(b): h1.get(b, 0) - h0.get(b, 0) for b in sorted(set(h1) | set(h0)) if h1.get(b, 0) - h0.get(b, 0)}
        out[model] = {
            "requests": int(req), "inferences": int(inf), "executions": int(execs),
            "mean_batch": round(inf / execs, 2) if execs else None,
            "queue_us_per_request": round(d("nv_inference_queue_duration_us") / req, 1) if req else None,
            "compute_infer_us_per_execution": round(d("nv_inference_compute_infer_duration_us") / execs, 1)
            if execs else None,
            "batch_size_histogram": hist,
        }
    return out


# --------------------------------------------------------------------------- the streams
async def run_level(url: str, n: int, seconds: float, clips, warmup_s: float = 1.0) -> dict:
    """``n`` streams for ``seconds``; e2e latencies (ms) of the frames after the warm-up."""
    from tritonclient.grpc import InferInput, InferRequestedOutput, aio
    from tritonclient.utils import np_to_triton_dtype

    host, port = parse_url(url)
    outputs = {"face_recon": ["blendshapes", "rotation_6d", "translation", "identity"], "speech2face": ["blendshapes"]}
    clients = [aio.InferenceServerClient(f"{host}:{port}") for _ in range(n)]
    t0 = time.perf_counter() + 0.2
    lat: list[float] = []
    late_frames = [0]
    errors = [0]

    async def call(client, model, feeds):
        ins = []
        for k, v in feeds.items():
            i = InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
            i.set_data_from_numpy(v)
            ins.append(i)
        await client.infer(model, ins, outputs=[InferRequestedOutput(o) for o in outputs[model]],
                           client_timeout=10.0)

    async def stream(s: int):
        clip = clips[s % len(clips)]
        phase = (s * 0.37) % 1.0 / FPS  # streams do not tick in lockstep
        start = (s * 7) % 50
        frame = 0
        while True:
            t_sched = t0 + phase + frame / FPS
            if t_sched - t0 > seconds:
                return
            delay = t_sched - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late_frames[0] += t_sched - t0 >= warmup_s
            i = start + frame
            try:
                await asyncio.gather(*(call(clients[s], m, clip[m][i % len(clip[m])]) for m in MODELS))
            except Exception:  # noqa: BLE001 - counted; the stream goes on
                errors[0] += 1
            if t_sched - t0 >= warmup_s:
                lat.append((time.perf_counter() - t_sched) * 1e3)
            frame += 1

    await asyncio.gather(*(stream(s) for s in range(n)))
    for c in clients:
        await c.close()
    arr = np.array(lat) if lat else np.array([np.inf])
    frames_expected = int(n * (seconds - warmup_s) * FPS)
    return {"streams": n, "seconds": seconds, "frames": len(lat), "frames_expected": frames_expected,
            "late_starts": late_frames[0], "errors": errors[0],
            "e2e_ms": {"p50": round(float(np.percentile(arr, 50)), 2), "p95": round(float(np.percentile(arr, 95)), 2),
                       "p99": round(float(np.percentile(arr, 99)), 2), "max": round(float(arr.max()), 2)}}


def warm_up(client, clips) -> int:
    """One request per distinct input shape of every model (first calls allocate), before any level."""
    from tritonclient.grpc import InferInput
    from tritonclient.utils import np_to_triton_dtype

    seen = set()
    for clip in clips:
        for model in MODELS:
            for feeds in clip[model]:
                key = (model,) + tuple(v.shape for v in feeds.values())
                if key in seen:
                    continue
                seen.add(key)
                ins = []
                for k, v in feeds.items():
                    i = InferInput(k, list(v.shape), np_to_triton_dtype(v.dtype))
                    i.set_data_from_numpy(v)
                    ins.append(i)
                client.infer(model, ins, client_timeout=30)
    return len(seen)


def held(level: dict) -> bool:
    """p95 within the budget, no errors, and (almost) every frame done."""
    return (level["e2e_ms"]["p95"] <= BUDGET_MS and level["errors"] == 0
            and level["frames"] >= 0.98 * level["frames_expected"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "streams_cpu.json")
    ap.add_argument("--url", default=None, help="a running server on this machine (grpc://127.0.0.1:PORT)")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of one level, s (first second warm-up)")
    ap.add_argument("--max-streams", type=int, default=64)
    ap.add_argument("--time-limit", type=float, default=300.0, help="stop after this many seconds of streams")
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to avatar-app serve (repeatable)")
    ap.add_argument("--note", default="", help="recorded with the results (e.g. 'machine loaded by other work')")
    ap.add_argument("--testdata", type=Path,
                    default=Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata")))
    args = ap.parse_args()

    clips = load_feeds(args.testdata)
    proc = None
    if args.url:
        host, port = parse_url(args.url)
        if not is_loopback(host):
            raise SystemExit(f"{args.url}: this benchmark sends traffic to loopback addresses only")
        url = format_url(host, port)
        session = read_session(port)
        if session is None:
            raise SystemExit(f"no session file of a server on port {port} (start it as the same user)")
        metrics_port = int(session["metrics_port"])
    else:
        proc, url, metrics_port = start_server(None, args.serve_arg)
        session = read_session(parse_url(url)[1])
    token = (session or {}).get("token")
    import tritonclient.grpc as grpcclient

    from avatar_app.inference.remote import server_engines

    host, port = parse_url(url)
    client = grpcclient.InferenceServerClient(f"{host}:{port}")
    engines = server_engines(host, port)["models"]
    print(f"warm-up: {warm_up(client, clips)} distinct requests", flush=True)
    load0 = os.getloadavg()
    levels: dict[int, dict] = {}
    t_start = time.monotonic()

    def measure(n: int) -> dict:
        before, h0 = scrape(metrics_port), batch_stats(client, token)
        level = asyncio.run(run_level(url, n, args.seconds, clips))
        level["server"] = server_figures(before, scrape(metrics_port), h0, batch_stats(client, token))
        level["held"] = held(level)
        levels[n] = level
        print(f"N={n:3d}: p50 {level['e2e_ms']['p50']:6.1f} ms  p95 {level['e2e_ms']['p95']:6.1f} ms  "
              f"frames {level['frames']}/{level['frames_expected']}  mean batch "
              f"{level['server']['face_recon']['mean_batch']}/{level['server']['speech2face']['mean_batch']}  "
              f"{'held' if level['held'] else 'NOT held'}", flush=True)
        return level

    try:
        n, good, bad = 1, 0, None
        while n <= args.max_streams and time.monotonic() - t_start < args.time_limit:
            if measure(n)["held"]:
                good, n = n, n * 2
            else:
                bad = n
                break
        if good and bad is None and n > args.max_streams:
            bad = args.max_streams + 1
        while bad is not None and bad - good > 1 and time.monotonic() - t_start < args.time_limit:
            mid = (good + bad) // 2
            if measure(mid)["held"]:
                good = mid
            else:
                bad = mid
    finally:
        client.close()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    result = {
        "benchmark": "streams", "budget_ms": round(BUDGET_MS, 2), "fps": FPS,
        "largest_streams_held": good,
        "search_complete": bad is not None and bad - good <= 1,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": [round(x, 2) for x in load0],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
        "note": args.note,
        "server": {"url": url,
                   "engines": {m: {k: e[k] for k in ("engine", "max_batch_size")} for m, e in engines.items()},
                   "serve_args": args.serve_arg, "transport": "gRPC, one channel per stream, no shared memory"},
        "clips": list(CLIPS),
        "levels": [levels[k] for k in sorted(levels)],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"largest N held at p95 <= {BUDGET_MS:.1f} ms: {good}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
