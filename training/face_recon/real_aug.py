"""Augmented real stills and real-frame pose targets for train_real.py (consistency and depth losses).

Usage (repository root; needs MediaPipe, i.e. the development machine, after real_data.py)::

    python -m training.face_recon.real_aug --real tmp/face_recon_real.npz --out tmp/face_recon_real_aug.npz

Two additions to real_data.py's set, both keyed by its sample indices:

1. **Re-tracked stills.** Every still of the set (``images/`` and the odd London ids) is
   perturbed the way the engine tests perturb a photo and tracked again by MediaPipe (IMAGE
   mode): JPEG re-encodes at quality 85-95 after a sub-pixel shift of up to 1 px (as
   :func:`avatar_app.evaluation.stability.still_jitter_sd`), in-plane rotations by +-12 deg and
   +-6 deg (as the rotation relation), a 0.7 rescale and the mirror image (as the flip
   relation; its aligned points are mirrored back). Each copy is aligned
   (:func:`~avatar_app.reconstruction.engine.head_frame`) like the original. train_real.py asks
   the output on a copy, read against a neutral, to equal the output on the original read
   against the same neutral (MediaPipe's own changes under these perturbations are not
   expression). The neutrals: the still itself (a calibrated still: ``x`` = copy - still) and,
   for a (neutral, expression) pair of one person (the London pairs, the two GRID frames), the
   person's neutral photo.
2. **Pose targets of the video frames.** Per video frame the alignment's translation ``t0``
   and the geometric solver's translation (its own IPD-scaled neutral, reset per clip, frames
   in order as in real_data.py): the target of the engine's depth scale
   (:func:`~avatar_app.reconstruction.engine.depth_scale`), which the runtime applies to ``t0``.

Stored:

- ``aug_head``: (M, 146, 3) float32 metres, the copies' aligned points on the network's subset;
- ``aug_src``: (M,) int32 real-set index of the still each copy was made from;
- ``aug_kind``: (M,) int8, 0 JPEG + shift, 1 rotation, 2 rescale, 3 the mirror image (its aligned
  points mirrored back: the flip relation);
- ``aug_copy``: (M,) int8 index into :data:`COPIES`;
- ``pair_neutral``, ``pair_expr``: (Q,) int32 real-set indices of (neutral, expression) stills of one person;
- ``t0``, ``t_solver``: (N, 3) float32 metres per real sample (zeros for stills).

Raises (main): InputError when a recording cannot be decoded; a mismatch against the real set's
aligned points (the set was built from other data) is an AssertionError.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("face_recon.real_aug")

#: The stills the engine tests perturb (tests/reconstruction/test_face_recon_real.py: the
#: stability, rotation, rescale and flip relations): train_real.py leaves their copies and
#: pairs out of the consistency loss by default, so those tests measure held-out photos.
TEST_STILLS = ("grid_lbax4n_frame10", "grid_lbax4n_frame29", "london_005_03_neutral", "london_005_08_smiling",
               "london_005_03", "london_005_08")  # the last two: the same person's other pair

#: Copies per still: (kind, rotation deg, scale, JPEG + shift, mirrored).
COPIES = tuple([(0, 0.0, 1.0, True, False)] * 8) + (
    (1, 12.0, 1.0, False, False), (1, -12.0, 1.0, False, False), (1, 6.0, 1.0, True, False),
    (1, -6.0, 1.0, True, False), (2, 0.0, 0.7, False, False), (3, 0.0, 1.0, False, True),
    (3, 0.0, 1.0, True, True))


def perturb(img: np.ndarray, rot_deg: float, scale: float, jpeg: bool, rng: np.random.Generator) -> np.ndarray:
    """One perturbed copy of a BGR still (rotation about the centre, rescale, shift + JPEG)."""
    import cv2

    h, w = img.shape[:2]
    out = img
    if rot_deg:
        m = cv2.getRotationMatrix2D((w / 2, h / 2), rot_deg, 1.0)
        out = cv2.warpAffine(out, m, (w, h), borderMode=cv2.BORDER_REPLICATE)
    if scale != 1.0:
        out = cv2.resize(out, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    if jpeg:
        dx, dy = rng.uniform(-1, 1, 2)
        hh, ww = out.shape[:2]
        out = cv2.warpAffine(out, np.float32([[1, 0, dx], [0, 1, dy]]), (ww, hh), borderMode=cv2.BORDER_REPLICATE)
        _, enc = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(85, 96))])
        out = cv2.imdecode(enc, cv2.IMREAD_COLOR)
    return out


def build(real: dict, testdata: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """The additions (module docstring) for ``real`` (real_data.py's arrays)."""
    import cv2

    from avatar_app.core.errors import NoFaceError
    from avatar_app.evaluation.benchmark import real_videos
    from avatar_app.evaluation.landmarks import new_tracker, track_image, track_video
    from avatar_app.reconstruction import normalise as N
    from avatar_app.reconstruction.engine import head_frame
    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.tracking.face_mesh import RunningMode

    sub = np.asarray(N.SUBSET)
    names = [str(s) for s in real["clip_names"]]
    clip_of = real["clip"].astype(int)
    n_all = len(real["x"])
    t0s, tss = np.zeros((n_all, 3), np.float32), np.zeros((n_all, 3), np.float32)
    solver = GeometricSolver()
    for v in real_videos(testdata):
        clip = track_video(v)
        idx = np.flatnonzero(clip_of == names.index(clip.name))
        frames = list(clip.frames())
        assert len(frames) == len(idx), clip.name
        solver.reset()
        for j, (i, _, lm) in zip(idx, frames):
            head, _, t0 = head_frame(lm)
            assert np.abs(head - real["head"][j]).max() < 1e-4, (clip.name, i)
            t0s[j] = t0
            tss[j] = solver.reconstruct(lm, float(clip.times[i])).translation
        log.info("%s: pose targets of %d frames", clip.name, len(idx))
    files = {p.stem: p for p in (testdata / "images").rglob("*") if p.suffix.lower() in (".jpg", ".png")}
    rng = np.random.default_rng(seed)
    heads, srcs, kinds, copy_ids = [], [], [], []
    still_idx = np.flatnonzero(real["still"])
    with new_tracker(RunningMode.IMAGE) as tracker:
        for k, j in enumerate(still_idx):
            img = cv2.imread(str(files[names[clip_of[j]]]))
            for ci, (kind, rot, scale, jpeg, mirrored) in enumerate(COPIES):
                src_img = img[:, ::-1].copy() if mirrored else img
                try:
                    lm = track_image(files[names[clip_of[j]]], use_cache=False, tracker=tracker,
                                     image=perturb(src_img, rot, scale, jpeg, rng))
                except NoFaceError:
                    continue
                head = head_frame(lm)[0]
                if mirrored:  # back to the original's side: the network is exactly mirror-symmetric
                    head = N.mirror_points(head)
                heads.append(head[sub])
                copy_ids.append(ci)
                srcs.append(j)
                kinds.append(kind)
            if (k + 1) % 10 == 0:
                log.info("stills %d/%d: %d copies", k + 1, len(still_idx), len(heads))
    # (neutral, expression) pairs of one person: London "london_<id>_03[...]" / "london_<id>_08[...]", GRID frames
    by_name = {names[clip_of[j]]: int(j) for j in still_idx}
    pn, pe = [], []
    for name, j in by_name.items():
        parts = name.split("_")
        if parts[0] == "london" and len(parts) >= 3 and parts[2] == "08":
            for other, jn in by_name.items():
                op = other.split("_")
                if op[0] == "london" and len(op) >= 3 and op[1] == parts[1] and op[2] == "03" \
                        and (len(op) > 3) == (len(parts) > 3):
                    pn.append(jn)
                    pe.append(j)
    if "grid_lbax4n_frame10" in by_name and "grid_lbax4n_frame29" in by_name:
        pn.append(by_name["grid_lbax4n_frame10"])
        pe.append(by_name["grid_lbax4n_frame29"])
    return {"aug_head": np.array(heads, np.float32), "aug_src": np.array(srcs, np.int32),
            "aug_kind": np.array(kinds, np.int8), "aug_copy": np.array(copy_ids, np.int8),
            "pair_neutral": np.array(pn, np.int32),
            "pair_expr": np.array(pe, np.int32), "t0": t0s, "t_solver": tss}


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path,
                    default=Path(os.environ.get("AVATAR_TESTDATA", Path(__file__).resolve().parents[3] / "shared"
                                                / "testdata")), help="the shared test data folder")
    ap.add_argument("--real", type=Path, default=Path("tmp/face_recon_real.npz"), help="real_data.py's set")
    ap.add_argument("--out", type=Path, default=Path("tmp/face_recon_real_aug.npz"), help="the .npz to write")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with np.load(args.real) as z:
        real = {k: z[k] for k in z.files}
    data = build(real, args.testdata)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **data)
    log.info("wrote %s: %d copies of %d stills, %d pairs", args.out, len(data["aug_src"]),
             len(np.unique(data["aug_src"])), len(data["pair_neutral"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
