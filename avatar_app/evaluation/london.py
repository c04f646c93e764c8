"""London pairs: does a still smiling photo read as a smile, and a neutral one as neutral?

The Face Research Lab London Set (DeBruine and Jones 2017, CC BY 4.0; in
``../shared/testdata/images/london``) has a neutral (``*_03``) and a smiling
(``*_08``) studio photo of each of 71 people, with self-reported age, sex and
ethnicity. Each photo is read alone by a fresh face path (no calibration, no
other frame), as a user who starts the app smiling is read in the first frame.

Criteria per person (issue 17):

- smile: the mean of mouthSmileLeft/Right on the smiling photo is >= 0.3 and
  >= 0.25 above the same person's neutral photo;
- neutral: on the neutral photo every blendshape is <= 0.25 and the mean smile <= 0.15.

Figures are given overall and per age band, sex and ethnicity.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape

SMILE_MIN, SMILE_GAIN_MIN = 0.3, 0.25
NEUTRAL_MAX, NEUTRAL_SMILE_MAX = 0.25, 0.15
#: Age bands, years (lower bound inclusive).
AGE_BANDS = ((0, 25, "age <25"), (25, 30, "age 25-29"), (30, 200, "age 30+"))


def people(folder: Path) -> list[dict]:
    """``[{"id", "age", "sex", "ethnicity", "neutral": Path, "smiling": Path}]`` of the set.

    Raises:
        InputError: the folder or its london_info.csv is missing.
    """
    from avatar_app.core.errors import InputError

    info = Path(folder) / "london_info.csv"
    if not info.is_file():
        raise InputError(f"London set not found: {info}", info)
    out = []
    with open(info, newline="") as f:
        for row in csv.DictReader(f):
            fid = row["face_id"]
            n, s = Path(folder) / f"london_{fid}_03.jpg", Path(folder) / f"london_{fid}_08.jpg"
            if n.is_file() and s.is_file():
                age = row["face_age"]
                out.append({"id": fid, "age": int(age) if age.isdigit() else None, "sex": row["face_gender"],
                            "ethnicity": row["face_eth"], "neutral": n, "smiling": s})
    return out


def age_band(age: int | None) -> str:
    """The age band's label ("age NA" when unknown)."""
    if age is None:
        return "age NA"
    return next(label for lo, hi, label in AGE_BANDS if lo <= age < hi)


def _smile(w: np.ndarray) -> float:
    return float(0.5 * (w[Blendshape.mouthSmileLeft] + w[Blendshape.mouthSmileRight]))


def read_still(reconstructor, landmarks) -> np.ndarray:
    """(52,) weights of one still read alone (reset, no calibration, t = 0)."""
    reconstructor.reset()
    return np.asarray(reconstructor.reconstruct(landmarks, 0.0).blendshapes, np.float64)


def evaluate(reconstructor, folder: Path) -> dict:
    """The London figures of one face path.

    Args:
        reconstructor: a FaceReconstructor.
        folder: the London set's folder.

    Returns:
        ``{"overall": {...}, "groups": {label: {...}}, "people": [...]}``; each summary holds
        ``n``, ``smile_ok``/``neutral_ok``/``both_ok`` fractions, mean smiles and the most
        frequent failing neutral shape.
    """
    from avatar_app.evaluation.landmarks import track_image
    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    rows = []
    with FaceTracker(RunningMode.IMAGE) as tracker:
        for p in people(folder):
            wn = read_still(reconstructor, track_image(p["neutral"], tracker=tracker))
            ws = read_still(reconstructor, track_image(p["smiling"], tracker=tracker))
            sn, ss = _smile(wn), _smile(ws)
            top = int(np.argmax(wn))
            rows.append({
                "id": p["id"], "age": p["age"], "sex": p["sex"], "ethnicity": p["ethnicity"],
                "smile_neutral": sn, "smile_smiling": ss, "max_neutral": float(wn[top]),
                "max_neutral_shape": BLENDSHAPE_NAMES[top],
                "smile_ok": bool(ss >= SMILE_MIN and ss - sn >= SMILE_GAIN_MIN),
                "neutral_ok": bool(wn.max() <= NEUTRAL_MAX and sn <= NEUTRAL_SMILE_MAX),
            })
    for r in rows:
        r["both_ok"] = r["smile_ok"] and r["neutral_ok"]
    groups = defaultdict(list)
    for r in rows:
        for g in (age_band(r["age"]), r["sex"], r["ethnicity"]):
            groups[g].append(r)
    return {"overall": summarise(rows), "groups": {g: summarise(v) for g, v in sorted(groups.items())},
            "people": rows}


def summarise(rows: list[dict]) -> dict:
    """Fractions correct and mean smiles of a list of per-person rows."""
    if not rows:
        return {"n": 0}
    fails = defaultdict(int)
    for r in rows:
        if r["max_neutral"] > NEUTRAL_MAX:
            fails[r["max_neutral_shape"]] += 1
    return {
        "n": len(rows),
        "smile_ok": float(np.mean([r["smile_ok"] for r in rows])),
        "neutral_ok": float(np.mean([r["neutral_ok"] for r in rows])),
        "both_ok": float(np.mean([r["both_ok"] for r in rows])),
        "mean_smile_smiling": float(np.mean([r["smile_smiling"] for r in rows])),
        "mean_smile_neutral": float(np.mean([r["smile_neutral"] for r in rows])),
        "neutral_failures_by_shape": dict(sorted(fails.items(), key=lambda kv: -kv[1])),
    }
