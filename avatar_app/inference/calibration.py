"""INT8 calibration sets: the default set shipped beside a model plus the user's own samples.

User samples are real inputs recorded during the user's session (at least
:data:`MIN_USER_SAMPLES` for a user calibration), stored as ``.npz`` files under
``user_data_dir()/calibration/<model name>/`` on this machine only, and
deletable with :meth:`CalibrationStore.clear` (``avatar-app engines calibrate --clear``).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from avatar_app.core.errors import InputError
from avatar_app.inference.dirs import user_data_dir
from avatar_app.inference.modelinfo import ModelInfo, load_feed_set

logger = logging.getLogger(__name__)

#: Samples a user calibration should have (issue 4): 500 frames / audio windows.
MIN_USER_SAMPLES = 500


class CalibrationStore:
    """The user's recorded calibration samples of one model.

    Args:
        model_name: model file stem (``face_recon``).
        root: folder holding all models' stores (default ``user_data_dir()/calibration``).

    Thread: ``add`` may be called from the processing thread; it writes one file per call.
    """

    def __init__(self, model_name: str, root: Path | None = None):
        self.model_name = model_name
        self.root = Path(root) if root is not None else user_data_dir() / "calibration"
        self.folder = self.root / model_name

    def add(self, feeds: Mapping[str, np.ndarray]) -> Path:
        """Store a block of samples (one array per input, samples on axis 0).

        Returns:
            The written .npz path.

        Raises:
            InputError: empty or inconsistent arrays.
        """
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        counts = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
        if not arrays or len(counts) != 1 or 0 in counts:
            raise InputError("calibration samples need one non-empty array per input, "
                             f"all with the same number of samples on axis 0 (got {counts})")
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"samples-{time.time_ns()}.npz"
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)
        return path

    def files(self) -> list[Path]:
        """The stored sample files, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.glob("samples-*.npz") if ".tmp" not in p.suffixes)

    def load(self, info: ModelInfo) -> list[dict[str, np.ndarray]]:
        """All stored sample sets checked against the model's inputs (unreadable files skipped)."""
        sets = []
        for p in self.files():
            try:
                sets.append(load_feed_set(p, info.inputs))
            except InputError as exc:
                logger.warning("skipping calibration file %s: %s", p, exc)
        return sets

    def count(self, info: ModelInfo) -> int:
        """Number of stored samples usable for ``info``."""
        return sum(next(iter(s.values())).shape[0] for s in self.load(info))

    def clear(self) -> int:
        """Delete every stored sample file of this model; returns how many were deleted."""
        files = self.files()
        for p in files:
            p.unlink(missing_ok=True)
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()
        return len(files)


def calibration_sets(info: ModelInfo, store: CalibrationStore | None = None,
                     extra: list[Mapping[str, np.ndarray]] | None = None) -> list[dict[str, np.ndarray]]:
    """Default set beside the model, then the user's stored samples, then ``extra``.

    Falls back to the validation set, then to seeded random inputs (with a
    warning) when a model ships no calibration set.
    """
    sets: list[dict[str, np.ndarray]] = []
    if info.calibration_path.is_file():
        sets.append(load_feed_set(info.calibration_path, info.inputs))
    if store is not None:
        sets.extend(store.load(info))
    sets.extend(dict(e) for e in extra or [])
    if not sets:
        if info.validation_path.is_file():
            logger.warning("%s has no calibration set; calibrating on its validation set", info.name)
            sets.append(load_feed_set(info.validation_path, info.inputs))
        else:
            logger.warning("%s has no calibration set; calibrating on random inputs", info.name)
            sets.append(info.example_feeds(batch=32, seed=1))
    return sets


def validation_set(info: ModelInfo) -> tuple[dict[str, np.ndarray], str]:
    """The model's validation set and where it came from (``"file"`` or ``"synthetic"``)."""
    if info.validation_path.is_file():
        return load_feed_set(info.validation_path, info.inputs), "file"
    logger.warning("%s ships no validation set (%s); verifying on random inputs",
                   info.name, info.validation_path.name)
    return info.example_feeds(batch=16, seed=2), "synthetic"


#: Phrase of :func:`real_data_missing`'s reasons (the studio's Tracking row tells them apart by it).
REAL_DATA_ONLY = "verified only on real face crops"


def real_data_missing(info: ModelInfo, precision: str) -> str:
    """Why a reduced precision of ``info`` cannot be verified here, or "" when it can.

    A model whose card sets ``"real_data_only": true`` (the landmark engines: their
    FP16/INT8 error on random images says nothing about faces, and an INT8 engine
    calibrated on random images loses real faces) is built in FP16 or INT8 only when its
    validation set of real inputs exists (``<stem>.val.npz`` beside the model or made on
    this machine, :func:`~avatar_app.inference.modelinfo.data_set_path`); INT8 then
    calibrates on the calibration set, else on that validation set.

    Args:
        info: the model.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"``.

    Returns:
        "" when the precision can be built and verified, else the reason in user terms (the
        missing file named). Developers make the sets in a checkout with
        ``python training/landmarks/make_sets.py`` (README); a pip-installed studio has no
        ``training/`` folder, so the reason does not name it.
    """
    if precision == "fp32" or not info.card.get("real_data_only") or info.validation_path.is_file():
        return ""
    return (f"{precision.upper()} of {info.name} is {REAL_DATA_ONLY} and none are installed "
            f"({info.validation_path.name} not found)")

