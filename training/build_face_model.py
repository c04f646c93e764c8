"""Build the face model (training rig) and write assets/face_model.npz.

Measures the neutral face on scikit-image's public-domain astronaut portrait
with the bundled MediaPipe face mesh, neutralises its smile, and builds the
52 ARKit blendshapes and the identity morphs by code
(avatar_app/avatar/face_model_*.py; docs/face_model.md explains every step).
Deterministic: the same mediapipe and scikit-image versions give the same
arrays, and the file is byte-identical (fixed zip timestamps). Needs
scikit-image (``pip install scikit-image``). Takes about 3 s. Usage, from the
repository root::

    .venv/bin/python training/build_face_model.py [--out assets/face_model.npz]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from avatar_app.avatar import face_model_measure as measure  # noqa: E402
from avatar_app.avatar.authoring import face_model_topology as topo  # noqa: E402
from avatar_app.avatar.face_model import FORMAT_VERSION, save_face_model  # noqa: E402
from avatar_app.avatar.authoring.face_model_identity import build_identity  # noqa: E402
from avatar_app.avatar.authoring.face_model_neutral import build_neutral  # noqa: E402
from avatar_app.avatar.authoring.face_model_shapes import build_blendshapes  # noqa: E402
from avatar_app.core import landmarks as lmk  # noqa: E402
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES  # noqa: E402

_log = logging.getLogger("build_face_model")

DEFAULT_OUT = ROOT / "assets" / "face_model.npz"
SOURCE = (
    "neutral measured with MediaPipe face mesh 0.10.21 on skimage.data.astronaut() "
    "(NASA, public domain), symmetrised and neutralised; shapes built by "
    "avatar_app/avatar/face_model_*.py"
)


def build_arrays() -> dict[str, np.ndarray]:
    """Build every array of the face-model file.

    Returns:
        name -> array: ``version`` (int), ``neutral`` (478, 3) float32 metres,
        ``triangles`` (852, 3) int32, ``blendshapes`` (52, 478, 3) float32,
        ``blendshape_names`` (52,) str, ``identity`` (K, 478, 3) float32,
        ``identity_names`` (K,) str, ``mirror`` (478,) int32, ``source`` str.

    Raises:
        avatar_app.core.errors.ModelLoadError: mediapipe or scikit-image missing.
        avatar_app.core.errors.NoFaceError: MediaPipe found no face in the photo.
    """
    tris = topo.tessellation_triangles()
    neutral, mirror, _ = build_neutral(tris)
    # Wind triangles so their normals point out of the face (+z on average).
    v = neutral[:lmk.NUM_MESH]
    n = np.cross(v[tris[:, 1]] - v[tris[:, 0]], v[tris[:, 2]] - v[tris[:, 0]])
    if n[:, 2].sum() < 0:
        tris = tris[:, ::-1].copy()
    shapes = build_blendshapes(neutral, tris, mirror)
    id_names, identity = build_identity(neutral, tris, mirror)
    return {
        "version": np.array(FORMAT_VERSION, np.int32),
        "neutral": neutral.astype(np.float32),
        "triangles": tris.astype(np.int32),
        "blendshapes": shapes.astype(np.float32),
        "blendshape_names": np.array(BLENDSHAPE_NAMES),
        "identity": identity.astype(np.float32),
        "identity_names": np.array(id_names),
        "mirror": mirror.astype(np.int32),
        "source": np.array(SOURCE),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: build and write the file, log the key figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .npz (default: %(default)s)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    arrays = build_arrays()
    save_face_model(args.out, arrays)
    dt = time.perf_counter() - t0
    nz = arrays["neutral"]
    _log.info("wrote %s (%.0f kB) in %.1f s", args.out, args.out.stat().st_size / 1024, dt)
    _log.info("face width %.1f mm, IPD %.1f mm, mouth width %.1f mm, eye apertures %.1f / %.1f mm",
              1000 * measure.face_width(nz), 1000 * measure.interpupillary_distance(nz),
              1000 * measure.mouth_width(nz), 1000 * measure.eye_aperture(nz, "left"),
              1000 * measure.eye_aperture(nz, "right"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
