"""Build the default avatar head and write assets/default_head.glb.

The head is built by code (avatar_app/avatar/authoring/default_head.py: a signed-distance
skin sampled on a grid, eyeballs, lids, teeth, tongue, hair, ...) and its 52
ARKit morph targets are transferred from the face model
(assets/face_model.npz, avatar_app/avatar/authoring/transfer.py). The result is written
as binary glTF 2.0 (avatar_app/avatar/authoring/glb_writer.py). Deterministic: the same
code and face model give a byte-identical file. Takes about 3 s. The app reads
the file at start-up (build_default_head) and builds the head itself when the
file is missing or was written by another builder version. Usage, from the
repository root::

    .venv/bin/python training/build_default_head.py [--out assets/default_head.glb]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from avatar_app.avatar.authoring.default_head import build_head  # noqa: E402
from avatar_app.avatar.authoring.glb_writer import write_avatar_glb  # noqa: E402
from avatar_app.avatar.default_head import BUILDER_VERSION  # noqa: E402

_log = logging.getLogger("build_default_head")

DEFAULT_OUT = ROOT / "assets" / "default_head.glb"


def main(argv: list[str] | None = None) -> int:
    """Command line entry: build the head and write the .glb; prints a one-line summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the .glb to write")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    mesh = build_head()
    t1 = time.perf_counter()
    write_avatar_glb(mesh, args.out, {"builder_version": BUILDER_VERSION})
    size_mb = args.out.stat().st_size / 1e6
    sys.stdout.write(f"{args.out}: {mesh.num_vertices} vertices, {mesh.num_triangles} triangles, "
                     f"{len(mesh.target_names)} morph targets, {size_mb:.2f} MB; built in {t1 - t0:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
