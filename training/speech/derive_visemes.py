"""Fit the viseme -> ARKit table on the face model (the training rig) and save it.

Usage::

    python -m training.speech.derive_visemes [--out training/speech/viseme_table.json]

Loads the rig with ``avatar_app.avatar.face_model.load_face_model()`` (neutral
(478, 3) m and blendshapes (52, 478, 3) in MediaPipe landmark order) and runs
:func:`avatar_app.speech.visemes.derive_viseme_table`, so audio and vision mean
the same amounts of each shape. make_data.py uses the saved table when it
exists, else the documented hand table (``HAND_TABLE``).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.speech.visemes import HAND_TABLE, VISEMES, derive_viseme_table

TABLE_PATH = Path(__file__).with_name("viseme_table.json")


def load_table(path: Path = TABLE_PATH) -> np.ndarray:
    """The derived (15, 52) table if saved, else HAND_TABLE."""
    if not path.is_file():
        return HAND_TABLE
    d = json.loads(path.read_text())
    m = np.zeros_like(HAND_TABLE)
    for v, row in d["table"].items():
        for name, w in row.items():
            m[VISEMES.index(v), BLENDSHAPE_NAMES.index(name)] = w
    return m


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=TABLE_PATH)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    from avatar_app.avatar.face_model import load_face_model

    rig = load_face_model()
    neutral = np.asarray(getattr(rig, "neutral", None) if not isinstance(rig, tuple) else rig[0])
    shapes = np.asarray(getattr(rig, "blendshapes", None) if not isinstance(rig, tuple) else rig[1])
    table = derive_viseme_table(neutral, shapes)
    rows = {v: {BLENDSHAPE_NAMES[j]: round(float(table[i, j]), 4) for j in np.nonzero(table[i])[0]}
            for i, v in enumerate(VISEMES)}
    a.out.write_text(json.dumps({"source": "derive_viseme_table on avatar_app.avatar.face_model",
                                 "table": rows}, indent=1))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
