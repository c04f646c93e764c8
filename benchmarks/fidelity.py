"""Real-face fidelity benchmark: every face path on every real recording and the London pairs.

Usage::

    python benchmarks/fidelity.py                 # solver and engine, writes results/fidelity.json
    python benchmarks/fidelity.py --paths solver_baseline,engine --baseline   # the baseline
                                                  # (solver_baseline is stored as "solver")
    python benchmarks/fidelity.py --paths solver --retrack-step 0

The JSON keeps the ``baseline`` section of an earlier run beside every later
one (``--baseline`` replaces it), and a Markdown table of both is printed.
Quality figures, not timings: the machine's load does not change them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from avatar_app.evaluation import geometry as G
from avatar_app.evaluation.benchmark import run_benchmark

RESULTS = ROOT / "benchmarks" / "results" / "fidelity.json"
TESTDATA = Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata"))


def make_path(name: str):
    """A fresh face path: ``solver`` (GeometricSolver), ``solver_baseline`` (its configuration before
    issue 17: linked eyes, feature-mapped mouth and brows) or ``engine`` (face_recon, ONNX Runtime CPU FP32)."""
    if name == "solver":
        from avatar_app.reconstruction.geometric import GeometricSolver

        return GeometricSolver()
    if name == "solver_baseline":  # the solver as it was before the issue-17 work (main at dd8d00c)
        from avatar_app.reconstruction.geometric import GeometricSolver, GeometricSolverConfig

        return GeometricSolver(GeometricSolverConfig(blink_link=2.0, blink_onset_link=2.0, eye_open_min=0.0,
                                                     eye_ref_symmetry=0.0, fit_shapes=False))
    if name == "engine":
        from avatar_app.reconstruction.engine import EngineReconstructor

        return EngineReconstructor(backend="ort_cpu", precision="fp32")
    raise SystemExit(f"unknown face path {name!r} (solver, solver_baseline, engine)")


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def table(runs: dict[str, dict]) -> str:
    """Markdown tables: per clip x feature r (a), pooled r and gain, retracked r, bars; one column per run."""
    names = list(runs)
    lines = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    first = next(iter(runs.values()))
    for g in G.GROUPS:
        lines.append(f"| pooled r / gain: {g} | " + " | ".join(
            _f(r["label_free"]["pooled"].get(g, {}).get("r")) + " / "
            + _f(r["label_free"]["pooled"].get(g, {}).get("gain")) for r in runs.values()) + " |")
    lines.append("| lowest clip mean r | " + " | ".join(_f(r["label_free"]["min_clip_mean_r"])
                                                      for r in runs.values()) + " |")
    if all("retracked" in r for r in runs.values()):
        for g in ("eye_aperture", "lip_gap", "mouth_width", "corner_height", "brow_height", "eye_asymmetry"):
            lines.append(f"| re-tracked r: {g} | " + " | ".join(
                _f(r["retracked"]["pooled"].get(g, {}).get("r")) for r in runs.values()) + " |")
    for clip in first["label_free"]["clips"]:
        lines.append(f"| {clip}: mean r | " + " | ".join(
            _f(r["label_free"]["clips"].get(clip, {}).get("mean_r")) for r in runs.values()) + " |")
        for g in G.GROUPS:
            if g in G.POSE_FEATURES:
                continue
            vals = [r["label_free"]["clips"].get(clip, {}).get("features", {}).get(g, {}).get("r") for r in runs.values()]
            if any(v is not None for v in vals):
                lines.append(f"| {clip}: {g} | " + " | ".join(_f(v) for v in vals) + " |")
    lines.append("| winks: frames ok | " + " | ".join(_f(r["winks"]["frames_ok"]) for r in runs.values()) + " |")
    for k in first.get("expressions", {}):
        lines.append(f"| event lift: {k} | " + " | ".join(
            _f(r["expressions"].get(k, {}).get("lift")) for r in runs.values()) + " |")
    for clip in first.get("jaw_in_words", {}):
        lines.append(f"| jawOpen words - silence: {clip} | " + " | ".join(
            _f(r["jaw_in_words"][clip]["lift"]) for r in runs.values()) + " |")
    for clip in first.get("fusion", {}):
        lines.append(f"| lip-gap r vision / fused: {clip} | " + " | ".join(
            _f(r["fusion"][clip]["vision_r"]) + " / " + _f(r["fusion"][clip]["fused_r"]) for r in runs.values()) + " |")
    if all("london" in r for r in runs.values()):
        lines.append("| London both ok | " + " | ".join(_f(r["london"]["overall"]["both_ok"]) for r in runs.values()) + " |")
        for g in first["london"]["groups"]:
            lines.append(f"| London {g} (n={first['london']['groups'][g]['n']}) | " + " | ".join(
                _f(r["london"]["groups"][g]["both_ok"]) for r in runs.values()) + " |")
    lines.append("| bars met | " + " | ".join(
        f"{sum(b['met'] for b in r['bars'].values())} of {len(r['bars'])}" for r in runs.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", default="solver,engine", help="face paths, comma-separated (default %(default)s)")
    ap.add_argument("--testdata", type=Path, default=TESTDATA, help="test data folder (default %(default)s)")
    ap.add_argument("--retrack-step", type=int, default=2, help="render and re-track every N-th frame; 0 skips (b)")
    ap.add_argument("--baseline", action="store_true", help="store this run as the baseline too")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results JSON (default %(default)s)")
    args = ap.parse_args(argv)
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    now = {}
    for name in args.paths.split(","):
        t = time.time()
        now[name] = run_benchmark(make_path(name), args.testdata, retrack_step=args.retrack_step,
                                  progress=lambda m, n=name: print(f"[{n}] {m}", flush=True))
        print(f"[{name}] done in {time.time() - t:.0f} s", flush=True)
    data = {"about": "benchmarks/fidelity.py: real-face fidelity (avatar_app/evaluation); 'baseline' is the "
                     "figures before the issue-17 work, 'current' the latest run",
            "baseline": old.get("baseline", {}), "current": {**old.get("current", {}), **now}}
    if args.baseline:  # solver_baseline is the solver's baseline: stored under "solver"
        data["baseline"] = {**data["baseline"],
                            **{("solver" if k == "solver_baseline" else k): v for k, v in now.items()}}
        data["current"] = {k: v for k, v in data["current"].items() if k != "solver_baseline"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    runs = {f"{k} (baseline)": v for k, v in data["baseline"].items()}
    runs.update({f"{k} (now)": v for k, v in data["current"].items()})
    print(table(runs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
