"""Real-face training set of the face_recon engine: MediaPipe landmarks of every real recording.

Usage (repository root; needs MediaPipe, i.e. the development machine, not the GPU one)::

    python -m training.face_recon.real_data --out tmp/face_recon_real.npz

For every real video of the test data (:func:`avatar_app.evaluation.benchmark.real_videos`:
the GRID talkers, the multi-face clip and the expressive clips), every photo in
``images/`` and the London pairs of the **odd** face ids (the even ids are the
held-out half of ``benchmarks/fidelity.py``; ``avatar_app/evaluation/london.py``), the
landmarks are tracked (cached: :mod:`avatar_app.evaluation.landmarks`) and turned into
the engine's inputs exactly as :class:`~avatar_app.reconstruction.engine.EngineReconstructor`
computes them at run time without a calibration: each frame aligned to the template
(:func:`~avatar_app.reconstruction.engine.head_frame`), the automatic neutral
(:class:`~avatar_app.reconstruction.auto_neutral.NeutralEstimator`) updated in time order,
``x`` = frame - neutral and ``n`` = neutral - template. A still is read alone (its own
neutral: ``x`` = 0), as the London benchmark reads it.

Stored per sample (the 146 landmarks of :data:`~avatar_app.reconstruction.normalise.SUBSET`):

- ``x``, ``n``: (N, 146, 3) float32 metres, the network's two inputs;
- ``head``: (N, 478, 3) float32 metres, the aligned frame (head frame; the benchmark's
  geometry, :func:`avatar_app.evaluation.geometry.shape_features`, is measured on it);
- ``solver``: (N, 52) float32, the geometric solver's output on the same frame (it runs
  over the same frames in the same order, reset per clip and per still): a distillation target;
- ``clip``: (N,) int16 index into ``clip_names``; ``frame``: (N,) int32 frame index;
- ``next``: (N,) int32 index of the next tracked frame of the same clip, -1 at a clip's end and
  for stills (temporal smoothness);
- ``still``: (N,) bool; ``smile_label``: (N,) int8, 1 smiling London photo, 0 neutral London
  photo, -1 no label (the weak labels the solver cannot use).

No generated data is committed: the file goes under an ignored folder.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("face_recon.real_data")


def _feeds(heads: list[np.ndarray], times: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Runtime feeds of a sequence of aligned faces (the automatic neutral in time order)."""
    from avatar_app.reconstruction import normalise as N
    from avatar_app.reconstruction.auto_neutral import NeutralEstimator
    from avatar_app.reconstruction.engine import EngineReconstructorConfig

    cfg = EngineReconstructorConfig()
    est = NeutralEstimator(cfg.warmup_s, cfg.slow_interval_s)
    sub = np.asarray(N.SUBSET)
    xs, ns = [], []
    for h, t in zip(heads, times):
        est.update(h, t)
        f = N.network_inputs(h[None], est.value[None])
        xs.append(f["landmarks"][0, sub])
        ns.append(f["neutral"][0, sub])
    return np.array(xs, np.float32), np.array(ns, np.float32)


def build(testdata: Path) -> dict[str, np.ndarray]:
    """The real-face set (module docstring) from the shared test data folder.

    Raises:
        InputError: a recording is missing or cannot be decoded.
    """
    from avatar_app.core.errors import NoFaceError
    from avatar_app.evaluation import london as L
    from avatar_app.evaluation.benchmark import real_videos
    from avatar_app.evaluation.landmarks import new_tracker, track_image, track_video
    from avatar_app.reconstruction.engine import head_frame
    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.tracking.face_mesh import RunningMode

    solver = GeometricSolver()
    keys = ("x", "n", "head", "solver", "clip", "frame", "next", "still", "smile_label")
    parts: dict[str, list] = {k: [] for k in keys}
    names: list[str] = []
    offset = 0

    def add(name, lms, times, still, label):
        nonlocal offset
        heads = [head_frame(lm)[0] for lm in lms]
        x, n = _feeds(heads, times)
        solver.reset()
        sol = np.array([solver.reconstruct(lm, t).blendshapes for lm, t in zip(lms, times)], np.float32)
        k = len(x)
        parts["x"].append(x)
        parts["n"].append(n)
        parts["head"].append(np.array(heads, np.float32))
        parts["solver"].append(sol)
        parts["clip"].append(np.full(k, len(names), np.int16))
        parts["frame"].append(np.arange(k, dtype=np.int32))
        nxt = np.arange(1, k + 1, dtype=np.int32) + offset
        nxt[-1] = -1
        if still:
            nxt[:] = -1
        parts["next"].append(nxt)
        parts["still"].append(np.full(k, still))
        parts["smile_label"].append(np.full(k, label, np.int8))
        names.append(name)
        offset += k

    for v in real_videos(testdata):
        clip = track_video(v)
        idx = [i for i, _, _ in clip.frames()]
        lms = [lm for _, _, lm in clip.frames()]
        add(clip.name, lms, [float(clip.times[i]) for i in idx], False, -1)
        log.info("%s: %d frames", clip.name, len(lms))
    with new_tracker(RunningMode.IMAGE) as tracker:
        for p in sorted((testdata / "images").glob("*.[jp][pn]g")):
            try:
                lm = track_image(p, tracker=tracker)
            except NoFaceError:
                continue
            add(p.stem, [lm], [0.0], True, -1)
        for person in L.people(testdata / "images" / "london"):
            if int(person["id"]) % 2 != 1:  # even ids: the held-out half
                continue
            for key, label in (("neutral", 0), ("smiling", 1)):
                try:
                    lm = track_image(person[key], tracker=tracker)
                except NoFaceError:
                    continue
                add(person[key].stem, [lm], [0.0], True, label)
    out = {k: np.concatenate(v) for k, v in parts.items()}
    out["clip_names"] = np.array(names)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path,
                    default=Path(os.environ.get("AVATAR_TESTDATA", Path(__file__).resolve().parents[3] / "shared"
                                                / "testdata")), help="the shared test data folder")
    ap.add_argument("--out", type=Path, default=Path("tmp/face_recon_real.npz"), help="the .npz to write")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data = build(args.testdata)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **data)
    log.info("wrote %s: %d samples (%d stills, %d London labels)", args.out, len(data["x"]),
             int(data["still"].sum()), int((data["smile_label"] >= 0).sum()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
