"""Headless render benchmark: frames per second of the default avatar, all blendshapes animated.

Usage::

    .venv/bin/python benchmarks/render.py [--frames 300] [--size 1280x720]
        [--out benchmarks/results/render.json] [--screens DIR]

``--avatar FILE`` (repeatable; default: the ICT FaceKit head in
../shared/testdata/avatars when present) also times user avatars loaded through
``avatar_app.avatar.loader`` with the same animated states, under
``"avatars": {name: {"mesh", "load_ms", "runs": {"msaa0", "msaa4"}}}``.

Each timed frame is a full ``HeadlessRenderer.render`` call: uniforms, draw,
MSAA resolve when enabled, and readback into a numpy array. All 52 weights,
the head rotation and the gaze change every frame. Results (per MSAA setting:
mean/median/p90/p99 wall milliseconds, fps, and CPU milliseconds per frame summed
over all threads) go to JSON together with the machine load, the OpenGL renderer
and the mesh size, since software rendering shares the CPU with everything else
running. ``--screens`` also saves reference
screenshots (neutral, jawOpen, blink, smile, yaw, gaze) as PNG.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from avatar_app.avatar.default_head import build_default_head  # noqa: E402
from avatar_app.core.blendshapes import Blendshape  # noqa: E402
from avatar_app.core.rotations import rot_x, rot_y, rot_z  # noqa: E402
from avatar_app.core.types import AvatarState  # noqa: E402
from avatar_app.render.headless import HeadlessRenderer  # noqa: E402


#: The ICT FaceKit test head (51 ARKit shapes), timed when present; never shipped.
DEFAULT_ICT = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "avatars" / "ict_facekit_arkit51.glb"


def rotation(yaw: float, pitch: float, roll: float = 0.0) -> np.ndarray:
    return (rot_y(yaw) @ rot_x(pitch) @ rot_z(roll)).astype(np.float32)


def animated_states(n: int) -> list[AvatarState]:
    """n states with every weight, the head pose and the gaze moving (precomputed, not timed)."""
    base = AvatarState.neutral()
    phase = np.linspace(0, 2 * np.pi, 52, endpoint=False)
    out = []
    for i in range(n):
        t = i / 30.0
        w = (0.5 + 0.5 * np.sin(2 * np.pi * 0.7 * t + phase)).astype(np.float32) * 0.8
        out.append(dataclasses.replace(
            base, weights=w, rotation=rotation(0.4 * math.sin(t), 0.2 * math.sin(1.3 * t), 0.1 * math.sin(0.7 * t)),
            gaze=np.array([0.3 * math.sin(2.1 * t), 0.15 * math.sin(1.7 * t)], np.float32)))
    return out


def time_frames(renderer: HeadlessRenderer, states: list[AvatarState], warmup: int = 10) -> dict:
    for s in states[:warmup]:
        renderer.render(s)
    times = []
    cpu0 = time.process_time()
    for s in states:
        t0 = time.perf_counter()
        renderer.render(s)
        times.append(time.perf_counter() - t0)
    cpu_ms = (time.process_time() - cpu0) * 1e3 / len(states)
    ms = np.array(times) * 1e3
    return {
        # CPU time of all this process's threads (llvmpipe's rasteriser threads too) per
        # frame: what a frame costs regardless of how busy the machine is.
        "cpu_ms_per_frame": round(float(cpu_ms), 3),
        "frames": len(ms),
        "mean_ms": round(float(ms.mean()), 3),
        "median_ms": round(float(np.median(ms)), 3),
        "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "fps_mean": round(float(1e3 / ms.mean()), 1),
        "fps_median": round(float(1e3 / np.median(ms)), 1),
    }


def time_avatar(path: Path, states: list[AvatarState], width: int, height: int, msaa: list[int]) -> dict:
    """Load a user avatar and time it like the default head (same animated states)."""
    from avatar_app.avatar.loader import load_avatar

    t0 = time.perf_counter()
    mesh = load_avatar(path)
    load_ms = (time.perf_counter() - t0) * 1e3
    out = {
        "file": path.name,
        "load_ms": round(load_ms, 1),
        "mesh": {"vertices": mesh.num_vertices, "triangles": mesh.num_triangles,
                 "morph_targets": len(mesh.target_names), "primitives": len(mesh.primitives),
                 "arkit_mapped": len(mesh.report.mapped_arkit)},
        "runs": {},
    }
    for samples in msaa:
        with HeadlessRenderer(width, height, msaa=samples, avatar=mesh) as r:
            out["mesh"]["morph_deltas"] = r.renderer.morph_entries
            run = time_frames(r, states)
            run["msaa_effective"] = r.renderer.msaa
            out["runs"][f"msaa{samples}"] = run
            print(f"{path.stem} msaa {samples}: {run['median_ms']:.2f} ms median, {run['fps_median']:.1f} fps "
                  f"(p90 {run['p90_ms']:.2f} ms), CPU {run['cpu_ms_per_frame']:.2f} ms/frame")
    return out


def save_screens(mesh, directory: Path, width: int, height: int) -> list[str]:
    import cv2

    def st(yaw=0.0, gaze=(0.0, 0.0), **kw):
        w = np.zeros(52, np.float32)
        for k, v in kw.items():
            w[Blendshape[k]] = v
        return dataclasses.replace(AvatarState.neutral(), weights=w, rotation=rotation(yaw, 0.0),
                                   gaze=np.array(gaze, np.float32))

    shots = {
        "neutral": st(), "jawOpen": st(jawOpen=1.0), "blink": st(eyeBlinkLeft=1.0, eyeBlinkRight=1.0),
        "blinkLeft": st(eyeBlinkLeft=1.0), "smile": st(mouthSmileLeft=1.0, mouthSmileRight=1.0),
        "yaw": st(yaw=0.5), "gaze": st(gaze=(0.35, 0.15)),
        "talk": st(jawOpen=0.35, mouthFunnel=0.6, browInnerUp=0.6),
    }
    directory.mkdir(parents=True, exist_ok=True)
    saved = []
    with HeadlessRenderer(width, height, msaa=4, avatar=mesh) as r:
        for name, s in shots.items():
            path = directory / f"{name}.png"
            cv2.imwrite(str(path), cv2.cvtColor(r.render(s), cv2.COLOR_RGB2BGR))
            saved.append(str(path))
    return saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--msaa", default="0,4", help="comma-separated sample counts")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "render.json")
    ap.add_argument("--screens", type=Path, default=None, help="also save screenshots to this folder")
    ap.add_argument("--avatar", type=Path, action="append", default=None,
                    help="also time this glTF/VRM avatar (repeatable; default: the ICT test head if present)")
    args = ap.parse_args()
    if args.avatar is None:
        args.avatar = [p for p in (DEFAULT_ICT,) if p.is_file()]
    width, height = (int(v) for v in args.size.lower().split("x"))

    t0 = time.perf_counter()
    mesh = build_default_head()
    build_ms = (time.perf_counter() - t0) * 1e3
    states = animated_states(args.frames)
    load_before = os.getloadavg()
    result = {
        "benchmark": "headless render + readback, default avatar, all 52 weights + pose + gaze animated",
        "size": [width, height],
        "machine": {"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
                    "python": platform.python_version(), "platform": platform.platform()},
        "mesh": {"vertices": mesh.num_vertices, "triangles": mesh.num_triangles,
                 "morph_targets": len(mesh.target_names), "build_ms": round(build_ms, 1)},
        "runs": {},
    }
    for samples in (int(s) for s in args.msaa.split(",")):
        with HeadlessRenderer(width, height, msaa=samples, avatar=mesh) as r:
            result["gl_renderer"] = r.ctx.info.get("GL_RENDERER")
            result["mesh"]["morph_deltas"] = r.renderer.morph_entries
            run = time_frames(r, states)
            run["msaa_effective"] = r.renderer.msaa
            result["runs"][f"msaa{samples}"] = run
            print(f"msaa {samples}: {run['median_ms']:.2f} ms median, {run['fps_median']:.1f} fps "
                  f"(p90 {run['p90_ms']:.2f} ms), CPU {run['cpu_ms_per_frame']:.2f} ms/frame")
    msaa_list = [int(x) for x in args.msaa.split(",")]
    if args.avatar:
        result["avatars"] = {p.stem: time_avatar(p, states, width, height, msaa_list) for p in args.avatar}
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.screens is not None:
        result["screens"] = save_screens(mesh, args.screens, width, height)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
