"""Make face_recon training/validation data: synthetic projected and render-and-track, seeded.

Two kinds of sample, both stored as *raw observations* (MediaPipe-style
normalised landmarks + image size), so the input normalisation
(:mod:`avatar_app.reconstruction.normalise`) is applied at training time,
exactly as at runtime:

synthetic (:func:`synthetic_set`, made on the fly by train.py; fast)
    the face model posed with a random identity, expression
    (:mod:`training.face_recon.sampling`), head pose (yaw +-60, pitch +-40,
    roll +-30 degrees), camera (horizontal field of view 45-80 degrees,
    0.3-1.5 m) projected by :func:`~avatar_app.avatar.face_model.synthetic_landmarks`,
    with Gaussian landmark noise (0.1-0.4 % of the face width, z twice that);
    each sample has its own neutral observation (same identity, near-frontal,
    relaxed face);

render-and-track (``render-track`` command; ~15-30 ms per image on one core)
    subjects (identity, skin tone, colours, light, shading, camera, distance
    so the face is 100-320 px wide in 640x480) rendered by
    :class:`~training.face_recon.render.VariedFaceRenderer`, degraded
    (blur, noise, JPEG), and tracked by the app's own
    :class:`~avatar_app.tracking.FaceTracker` (IMAGE mode): a near-frontal
    neutral frame then ``--frames`` random frames per subject. The inputs so
    carry MediaPipe's own errors (lids that under-close, a learned z).
    Untracked frames are dropped (counted in the file).

Usage (repository root)::

    python -m training.face_recon.make_data render-track --seed 1 --subjects 1000 \
        --frames 12 --out ~/.cache/avatar_app/face_recon/rt_train.npz

Render-and-track files hold ``landmarks`` (N, 478, 3) float32, ``image_size``
(N, 2), ``subject`` (N,) int32 index into the per-subject arrays
``neutral_landmarks`` (S, 478, 3) / ``neutral_image_size`` (S, 2) /
``identity`` (S, K), the targets ``weights`` (N, 52), ``rotation`` (N, 3, 3),
``translation`` (N, 3) metres, ``focal_px`` (N,), ``dropped`` (frames
not tracked) and ``eyes`` (the renderer's eye style). The same seed gives the same file.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from avatar_app.avatar.face_model import FaceModel, load_face_model
from avatar_app.core.rotations import rotation_from_euler
from training.face_recon import sampling as S

log = logging.getLogger("face_recon.make_data")

FACE_WIDTH_M = 0.133  # the rig's 234-454 width


def _rotations(pose_deg: np.ndarray) -> np.ndarray:
    r = np.radians(pose_deg)
    return np.stack([rotation_from_euler(*p) for p in r])


def project_normalised(points: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
                       focal_px: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Batched :func:`~avatar_app.avatar.face_model.synthetic_landmarks` with a camera per sample.

    Args:
        points: (B, N, 3) model-frame metres; rotation (B, 3, 3); translation (B, 3);
        focal_px: (B,) pixels; sizes: (B, 2) (width, height) pixels.

    Returns:
        (B, N, 3) float32 MediaPipe-style normalised landmarks (same formulas).
    """
    cam = np.einsum("bij,bnj->bni", rotation, points) + translation[:, None, :]
    depth = -cam[..., 2]
    f = np.asarray(focal_px, np.float64)[:, None]
    w, h = sizes[:, 0:1].astype(np.float64), sizes[:, 1:2].astype(np.float64)
    ref = -np.asarray(translation, np.float64)[:, 2:3]
    out = np.empty(cam.shape, np.float32)
    out[..., 0] = (0.5 * w + f * cam[..., 0] / depth) / w
    out[..., 1] = (0.5 * h - f * cam[..., 1] / depth) / h
    out[..., 2] = (depth - ref) * f / ref / w
    return out


def synthetic_set(seed: int, n: int, model: FaceModel | None = None,
                  small_share: float = 0.0) -> dict[str, np.ndarray]:
    """Projected synthetic samples with their own neutral observations.

    Args:
        seed: random seed.
        n: number of samples.
        model: the face model (default: the shipped one).
        small_share: share of scaled-down (small) expressions (see
            :func:`training.face_recon.sampling.sample_expressions`).

    Returns:
        dict with ``landmarks``/``neutral_landmarks`` (n, 478, 3) float32
        (normalised, MediaPipe style), ``image_size``/``neutral_image_size``
        (n, 2), ``weights`` (n, 52), ``identity`` (n, K), ``rotation`` (n, 3, 3),
        ``translation`` (n, 3), ``focal_px`` (n,) and ``subject`` = arange(n).
    """
    model = model or load_face_model()
    rng = np.random.default_rng(seed)
    k = model.num_identity
    weights = S.sample_expressions(rng, n, small_share)
    ident = S.sample_identity(rng, n, k)
    sizes = np.array([(640, 480), (1280, 720), (960, 540), (320, 240)], np.float64)[rng.integers(0, 4, n)]
    hfov = rng.uniform(45, 80, n)
    focal = 0.5 * sizes[:, 0] / np.tan(np.radians(hfov) / 2)
    dist = rng.uniform(0.3, 1.5, n)
    # keep the face inside the image: centre within +-30 % of the half-size
    off = rng.uniform(-0.3, 0.3, (n, 2)) * sizes / 2 * dist[:, None] / focal[:, None]
    trans = np.stack([off[:, 0], off[:, 1], -dist], 1)
    rot = _rotations(S.sample_pose_deg(rng, n))
    pts = model.evaluate(weights, ident)
    lm = np.empty((n, pts.shape[1], 3), np.float32)
    neutral_w = S.sample_neutral_noise(rng, n)
    npts = model.evaluate(neutral_w, ident)
    nrot = _rotations(np.clip(rng.normal(0, 1, (n, 3)) * np.array([5.0, 5.0, 3.0]), -12, 12))
    ntrans = trans * np.array([0.3, 0.3, 1.0]) * rng.uniform(0.9, 1.1, (n, 1))
    nlm = np.empty_like(lm)
    lm[:] = project_normalised(pts, rot, trans, focal, sizes)
    nlm[:] = project_normalised(npts, nrot, ntrans, focal, sizes)
    face_w = FACE_WIDTH_M * focal / dist / sizes[:, 0]  # face width in normalised x units
    for arr in (lm, nlm):
        sd = rng.uniform(0.001, 0.004, n) * face_w
        noise = rng.normal(0, 1, arr.shape) * sd[:, None, None]
        noise[..., 1] *= sizes[:, 0:1] / sizes[:, 1:2]  # same pixel noise in y
        noise[..., 2] *= 2.0
        arr += noise.astype(np.float32)
    return {"landmarks": lm, "neutral_landmarks": nlm, "image_size": sizes.astype(np.float32),
            "neutral_image_size": sizes.astype(np.float32), "weights": weights, "identity": ident,
            "rotation": rot.astype(np.float32), "translation": trans.astype(np.float32),
            "focal_px": focal.astype(np.float32), "subject": np.arange(n, dtype=np.int32)}


def render_track_set(seed: int, subjects: int, frames: int, out: Path,
                     size: tuple[int, int] = (640, 480), limits=(55.0, 35.0, 30.0),
                     first_subject: int = 0, eyes: str = "eyeball") -> dict:
    """Render-and-track samples (see the module docstring); writes ``out`` and returns a summary.

    ``eyes``: the renderer's eye style (:data:`training.face_recon.render.EYE_STYLES`);
    ``"discs"`` remakes the first renderer's subjects and images.
    """
    from avatar_app.tracking import FaceTracker, RunningMode
    from training.face_recon.render import SubjectLook, VariedFaceRenderer, degrade

    model = load_face_model()
    renderer = VariedFaceRenderer(model, size)
    w, h = size
    acc = {k: [] for k in ("landmarks", "image_size", "subject", "weights", "rotation",
                           "translation", "focal_px")}
    subj = {k: [] for k in ("neutral_landmarks", "neutral_image_size", "identity")}
    dropped = 0
    t0 = time.time()
    with FaceTracker(RunningMode.IMAGE) as tracker:
        for s in range(first_subject, first_subject + subjects):
            rng = np.random.default_rng([seed, s])
            look = SubjectLook(rng, eyes)
            ident = S.sample_identity(rng, 1, model.num_identity)[0]
            hfov = rng.uniform(50, 75)
            focal = 0.5 * w / np.tan(np.radians(hfov) / 2)
            face_px = rng.uniform(100, 320)
            dist = FACE_WIDTH_M * focal / face_px
            rest = model.evaluate(np.zeros(len(model.blendshape_names)), ident)
            neutral = None
            for attempt in range(3):
                nw = S.sample_neutral_noise(rng, 1)[0]
                npose = np.clip(rng.normal(0, 1, 3) * np.array([4.0, 4.0, 3.0]), -10, 10)
                ntrans = np.array([rng.uniform(-0.1, 0.1) * dist, rng.uniform(-0.1, 0.1) * dist, -dist])
                img = degrade(renderer.render(model.evaluate(nw, ident), _rotations(npose[None])[0],
                                              ntrans, focal, look, rest), rng)
                lm = tracker.process_image(np.ascontiguousarray(img[:, :, ::-1]))
                if lm is not None:
                    neutral = lm
                    break
            if neutral is None:
                dropped += frames
                continue
            si = len(subj["identity"])
            subj["neutral_landmarks"].append(neutral.points)
            subj["neutral_image_size"].append(np.array(size, np.float32))
            subj["identity"].append(ident)
            weights = S.sample_expressions(rng, frames)
            poses = S.sample_pose_deg(rng, frames, limits, wide=0.3)
            rots = _rotations(poses)
            for i in range(frames):
                margin = 0.25
                tr = np.array([rng.uniform(-margin, margin) * w / 2 * dist / focal,
                               rng.uniform(-margin, margin) * h / 2 * dist / focal,
                               -dist * rng.uniform(0.85, 1.2)])
                img = degrade(renderer.render(model.evaluate(weights[i], ident), rots[i], tr, focal, look,
                                              rest), rng)
                lm = tracker.process_image(np.ascontiguousarray(img[:, :, ::-1]))
                if lm is None:
                    dropped += 1
                    continue
                acc["landmarks"].append(lm.points)
                acc["image_size"].append(np.array(size, np.float32))
                acc["subject"].append(si)
                acc["weights"].append(weights[i])
                acc["rotation"].append(rots[i].astype(np.float32))
                acc["translation"].append(tr.astype(np.float32))
                acc["focal_px"].append(np.float32(focal))
            if (s - first_subject + 1) % 50 == 0:
                n = len(acc["subject"])
                log.info("subject %d/%d: %d frames, %d dropped, %.1f ms per image", s - first_subject + 1,
                         subjects, n, dropped, (time.time() - t0) * 1e3 / max(n + dropped + si + 1, 1))
                _save(out, acc, subj, dropped, seed, eyes)
    renderer.close()
    _save(out, acc, subj, dropped, seed, eyes)
    return {"frames": len(acc["subject"]), "subjects": len(subj["identity"]), "dropped": dropped,
            "seconds": time.time() - t0}


def _save(out: Path, acc: dict, subj: dict, dropped: int, seed: int, eyes: str = "eyeball") -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.stack(v) for k, v in acc.items() if v}
    arrays.update({k: np.stack(v) for k, v in subj.items() if v})
    arrays["dropped"] = np.array(dropped)
    arrays["seed"] = np.array(seed)
    arrays["eyes"] = np.array(eyes)  # the renderer's eye style
    tmp = out.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rt = sub.add_parser("render-track", help="render the rig and track it with MediaPipe")
    rt.add_argument("--seed", type=int, default=1)
    rt.add_argument("--subjects", type=int, default=1000)
    rt.add_argument("--frames", type=int, default=12, help="expression frames per subject")
    rt.add_argument("--first-subject", type=int, default=0)
    rt.add_argument("--out", type=Path, required=True)
    rt.add_argument("--eyes", choices=("eyeball", "discs"), default="eyeball",
                    help="eyeball: shaded eyeballs and photo texture (default); discs: the first renderer")
    sy = sub.add_parser("synthetic", help="write a projected synthetic set (train.py makes its own)")
    sy.add_argument("--seed", type=int, default=1)
    sy.add_argument("-n", type=int, default=20000)
    sy.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.cmd == "render-track":
        summary = render_track_set(args.seed, args.subjects, args.frames, args.out.expanduser(),
                                   first_subject=args.first_subject, eyes=args.eyes)
    else:
        data = synthetic_set(args.seed, args.n)
        args.out.expanduser().parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out.expanduser(), **data)
        summary = {"frames": args.n}
    log.info("done: %s", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
