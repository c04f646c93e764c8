"""Validation and calibration sets of real crops for the landmark engines, made from ../shared/testdata.

Usage (the app's venv: MediaPipe, OpenCV, PyAV)::

    python -m training.landmarks.make_sets --testdata ../shared/testdata [--out DIR]

The crops are what the engines see at run time:

- ``face_detection``: whole frames letterboxed into 128 x 128 (black border);
- ``face_landmark``: 192 x 192 crops of the ROI MediaPipe's own tracker would
  use for that frame (from its landmarks of the previous frame, or the
  detection on a first frame), cut by :mod:`avatar_app.tracking.roi`.

Each set is ``{"image": (N, 3, S, S) uint8}`` (the engines' float input
``image`` holds the same 0..255 values; the engine layer casts on load).
Validation and calibration come from different recordings (see ``SOURCES``).
The recordings may be used but not shipped, so the sets are written to
``user_data_dir()/datasets`` (``AVATAR_APP_DATA_DIR`` moves it), where the
engine layer looks when a model ships no sets, never into models/.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import cv2
import numpy as np

log = logging.getLogger("make_sets")

#: set -> (clips under video/, stills under images/); validation and calibration never share a recording.
SOURCES = {
    "val": (("grid_s1_bbaf2n.mp4", "grid_lbax4n.mp4", "openmpf_video_01.mp4", "expressive/lp_d3.mp4",
             "expressive/lp_d18.mp4"), ("lisa1_webcam.jpg", "london_005_03_neutral.jpg")),
    "calib": (("grid_s2_swwp2s.mp4", "expressive/lp_d9.mp4", "expressive/lp_d11.mp4"),
              ("london_021_03_neutral.jpg", "london_005_08_smiling.jpg")),
}
#: Samples per set and model.
COUNTS = {"val": 48, "calib": 96}


def _frames(path: Path, step: int, limit: int | None = None):
    from avatar_app.tracking.agreement import video_frames

    for i, (t, bgr) in enumerate(video_frames(path, limit)):
        yield (i + 1) % step == 0, t, bgr  # the first one taken has a previous frame when step > 1


def collect(testdata: Path, kind: str, count: int, max_frames: int | None = None) -> dict[str, np.ndarray]:
    """Crops of one set: ``{"face_detection": (N, 3, 128, 128) uint8, "face_landmark": (M, 3, 192, 192) uint8}``.

    Args:
        testdata: the shared test-data folder.
        kind: ``"val"`` or ``"calib"`` (:data:`SOURCES`).
        count: crops wanted per model (at most).
        max_frames: read at most this many frames of each clip (default: all).

    Raises:
        FileNotFoundError: a source recording is missing.
    """
    from avatar_app.tracking import FaceTracker, RunningMode
    from avatar_app.tracking import roi as R

    clips, stills = SOURCES[kind]
    det, mesh = [], []
    per_clip = max(1, count // (len(clips) + 1))
    for name in clips:
        path = testdata / "video" / name
        if not path.is_file():
            raise FileNotFoundError(path)
        n_frames = sum(1 for _ in _frames(path, 1, max_frames))
        step = max(1, n_frames // per_clip)
        prev = None
        with FaceTracker(RunningMode.VIDEO) as tracker:
            for take, t, bgr in _frames(path, step, max_frames):
                rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                lm = tracker.process_video_frame(bgr, t)
                if take:
                    det.append(_letterboxed(rgb))
                    if prev is not None:  # the ROI tracking from the previous frame's landmarks
                        rect = R.landmark_rects(prev[None, :, :2])
                        mesh.append(R.warp(rgb, R.crop_matrices(rect, R.MESH_SIZE)[0], R.MESH_SIZE))
                prev = None if lm is None else lm.pixels()
    for name in stills:
        bgr = cv2.imread(str(testdata / "images" / name))
        if bgr is None:
            raise FileNotFoundError(testdata / "images" / name)
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        det.append(_letterboxed(rgb))
        with FaceTracker(RunningMode.IMAGE) as tracker:
            lm = tracker.process_image(bgr)
        if lm is not None:
            rect = R.landmark_rects(lm.pixels()[None, :, :2])
            mesh.append(R.warp(rgb, R.crop_matrices(rect, R.MESH_SIZE)[0], R.MESH_SIZE))

    def pick(xs):
        return np.stack(xs[:count]).transpose(0, 3, 1, 2).copy()

    return {"face_detection": pick(det), "face_landmark": pick(mesh)}


def _letterboxed(rgb: np.ndarray) -> np.ndarray:
    from avatar_app.tracking import roi as R

    m = R.letterbox_matrices(np.array([[rgb.shape[1], rgb.shape[0]]]))[0]
    return R.warp(rgb, m, R.DETECTOR_SIZE, border=cv2.BORDER_CONSTANT)


def write_sets(testdata: Path, out: Path | None = None) -> dict[str, dict[str, list[int]]]:
    """Make and write every set; returns model -> set -> shape.

    Args:
        testdata: the shared test-data folder.
        out: the folder (default ``user_data_dir()/datasets``).
    """
    from avatar_app.inference.modelinfo import local_data_sets_dir

    out = Path(out) if out is not None else local_data_sets_dir()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict[str, list[int]]] = {}
    for kind, count in COUNTS.items():
        for model, arr in collect(testdata, kind, count).items():
            path = out / f"{model}.{kind}.npz"
            tmp = path.with_suffix(".tmp.npz")
            np.savez_compressed(tmp, image=arr)
            tmp.replace(path)
            report.setdefault(model, {})[kind] = list(arr.shape)
            log.info("wrote %s %s", path, arr.shape)
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--testdata", type=Path, default=Path("../shared/testdata"))
    ap.add_argument("--out", type=Path, default=None, help="folder (default: user_data_dir()/datasets)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(json.dumps(write_sets(args.testdata, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
