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

from avatar_app.evaluation.benchmark import run_benchmark  # noqa: E402 (after the path set-up)
from avatar_app.evaluation.landmarks import evaluation_tracker  # noqa: E402
from avatar_app.evaluation.report import results_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fidelity.json"
TESTDATA = Path(os.environ.get("AVATAR_TESTDATA", ROOT.parent / "shared" / "testdata"))


def make_path(name: str):
    """A fresh face path: ``solver`` (GeometricSolver), ``solver_baseline`` (its configuration before
    issue 17: linked eyes, feature-mapped mouth and brows) or ``engine`` (face_recon, ONNX Runtime CPU FP32)."""
    if name == "solver":
        from avatar_app.reconstruction.geometric import GeometricSolver

        return GeometricSolver()
    if name == "solver_baseline":  # the solver as it was before the issue-17 work (main at dd8d00c)
        from avatar_app.reconstruction.geometric import (
            GeometricSolver,
            GeometricSolverConfig,
        )

        return GeometricSolver(GeometricSolverConfig(blink_link=2.0, blink_onset_link=2.0, eye_open_min=0.0,
                                                     eye_ref_symmetry=0.0, fit_shapes=False))
    if name == "engine":
        from avatar_app.reconstruction.engine import EngineReconstructor

        return EngineReconstructor(backend="ort_cpu", precision="fp32")
    raise SystemExit(f"unknown face path {name!r} (solver, solver_baseline, engine)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", default="solver,engine", help="face paths, comma-separated (default %(default)s)")
    ap.add_argument("--testdata", type=Path, default=TESTDATA, help="test data folder (default %(default)s)")
    ap.add_argument("--retrack-step", type=int, default=2, help="render and re-track every N-th frame; 0 skips (b)")
    ap.add_argument("--baseline", action="store_true", help="store this run as the baseline too")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results JSON (default %(default)s)")
    ap.add_argument("--tracker", default="mediapipe", choices=("mediapipe", "onnx"),
                    help="the face tracker every landmark comes from (default %(default)s)")
    args = ap.parse_args(argv)
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    now = {}
    for name in args.paths.split(","):
        t = time.time()
        with evaluation_tracker(args.tracker):
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
    print(results_table(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
