"""What the engine layer needs to know about one ONNX model.

Metadata travels with the model (STYLE.md): ONNX ``metadata_props`` keys, or a
model-card dict / ``<stem>.card.json`` beside the file, override nothing but
add what the graph cannot say:

``avatar_app.dynamic_dims`` (card key ``dynamic_dims``)
    JSON object of symbolic dimension name (ONNX ``dim_param``, e.g. ``"B"``)
    or ``"input:axis"`` to ``[min, opt, max]``: the TensorRT optimisation profile.
``avatar_app.tolerances`` (card key ``tolerances``)
    JSON object of precision (``"fp16"``) to max absolute error; only values
    stricter than :data:`~avatar_app.inference.base.DEFAULT_TOLERANCES` are used.
``avatar_app.precisions`` (card key ``precisions``)
    JSON list of the precisions the model supports, e.g. ``["fp32", "fp16"]``
    for a GRU (ONNX Runtime has no QDQ GRU).

Data sets beside the model: ``<stem>.val.npz`` (validation) and
``<stem>.calib.npz`` (default INT8 calibration), or, where a model ships none,
the same names in ``user_data_dir()/datasets`` (sets made on this machine from
data that is not shipped). Each holds one array per input name, stacked along
that input's first (batch) axis.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.errors import InputError, ModelLoadError
from avatar_app.inference.base import DEFAULT_TOLERANCES, Precision, TensorSpec

logger = logging.getLogger(__name__)

META_DYNAMIC_DIMS = "avatar_app.dynamic_dims"
META_TOLERANCES = "avatar_app.tolerances"
META_PRECISIONS = "avatar_app.precisions"

# ONNX TensorProto element types -> numpy (subset the engines use).
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_,
                10: np.float16, 11: np.float64}


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class ProfileRange:
    """min/opt/max of one dynamic dimension (TensorRT optimisation profile)."""

    min: int
    opt: int
    max: int


@dataclass
class ModelInfo:
    """An ONNX model's specs, metadata and the data sets beside it.

    Attributes:
        path: the ONNX file.
        sha256: hex SHA-256 of its bytes.
        inputs / outputs: :class:`TensorSpec` s from the graph.
        dynamic_dims: dimension key (``"B"`` or ``"input:axis"``) to :class:`ProfileRange`.
        tolerances: max absolute error allowed per precision (defaults, or stricter).
        precisions: precisions the model supports.
        metadata: all ``metadata_props`` as strings.
        card: the model card the specs were read with (the dict given, or
            ``<stem>.card.json`` beside the model; {} when there is none).
    """

    path: Path
    sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dynamic_dims: dict[str, ProfileRange] = field(default_factory=dict)
    tolerances: dict[Precision, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    precisions: tuple[Precision, ...] = tuple(Precision)
    metadata: dict[str, str] = field(default_factory=dict)
    card: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Model name: the file stem (``face_recon``)."""
        return self.path.stem

    @property
    def validation_path(self) -> Path:
        """``<stem>.val.npz`` beside the model, else made on this machine (may not exist; see :func:`data_set_path`)."""
        return data_set_path(self.path, "val")

    @property
    def calibration_path(self) -> Path:
        """``<stem>.calib.npz`` beside the model, else made on this machine (may not exist)."""
        return data_set_path(self.path, "calib")

    @classmethod
    def from_onnx(cls, path: str | Path, card: Mapping | None = None) -> "ModelInfo":
        """Read specs and metadata of an ONNX file.

        Args:
            path: the .onnx file.
            card: optional model-card dict with ``dynamic_dims``/``tolerances``/
                ``precisions`` keys; else ``<stem>.card.json`` beside the model if present.

        Raises:
            ModelLoadError: missing or unreadable file, or malformed metadata.
        """
        import onnx  # lazy: heavy import

        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # onnx raises DecodeError and others
            raise ModelLoadError(f"{path} is not a readable ONNX file: {exc}") from exc
        if not model.graph.node or not model.graph.output:  # e.g. an empty file parses as an empty model
            raise ModelLoadError(f"{path} is not a readable ONNX file: it holds no graph "
                                 f"({path.stat().st_size} bytes; empty or not a model)")
        init_names = {i.name for i in model.graph.initializer}
        inputs = tuple(_spec(v) for v in model.graph.input if v.name not in init_names)
        outputs = tuple(_spec(v) for v in model.graph.output)
        meta = {p.key: p.value for p in model.metadata_props}
        if card is None:
            card_path = path.with_name(path.stem + ".card.json")
            if card_path.is_file():
                try:
                    card = json.loads(card_path.read_text())
                except (OSError, json.JSONDecodeError) as exc:
                    raise ModelLoadError(f"model card {card_path} is not valid JSON: {exc}") from exc
        card = dict(card or {})
        dyn_raw = _json_meta(meta, META_DYNAMIC_DIMS, path) or {}
        dyn_raw.update(card.get("dynamic_dims") or {})
        tol_raw = _json_meta(meta, META_TOLERANCES, path) or {}
        tol_raw.update(card.get("tolerances") or {})
        prec_raw = card.get("precisions") or _json_meta(meta, META_PRECISIONS, path)
        try:
            dynamic = {str(k): ProfileRange(*(int(x) for x in v)) for k, v in dyn_raw.items()}
            tolerances = dict(DEFAULT_TOLERANCES)
            for k, v in tol_raw.items():
                p = Precision.parse(k)
                tolerances[p] = min(tolerances[p], float(v))
            precisions = tuple(Precision.parse(p) for p in prec_raw) if prec_raw else tuple(Precision)
        except (TypeError, ValueError, InputError) as exc:
            raise ModelLoadError(f"{path}: malformed engine metadata: {exc}") from exc
        for key, r in dynamic.items():
            if not 1 <= r.min <= r.opt <= r.max:
                raise ModelLoadError(f"{path}: dynamic dim {key!r} needs 1 <= min <= opt <= max, got {r}")
        return cls(path=path, sha256=sha256_file(path), inputs=inputs, outputs=outputs,
                   dynamic_dims=dynamic, tolerances=tolerances, precisions=precisions, metadata=meta,
                   card=card)

    def profile(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Optimisation profile: input name to (min, opt, max) shapes.

        Raises:
            EngineBuildError: a dynamic dimension has no declared range.
        """
        from avatar_app.core.errors import EngineBuildError

        out = {}
        for spec in self.inputs:
            mins, opts, maxs = [], [], []
            for axis, (size, dim_name) in enumerate(zip(spec.shape, spec.dim_names)):
                if size is not None:
                    mins.append(size), opts.append(size), maxs.append(size)
                    continue
                r = self.dynamic_dims.get(f"{spec.name}:{axis}") or (
                    self.dynamic_dims.get(dim_name) if dim_name else None)
                if r is None:
                    raise EngineBuildError(
                        f"{self.path.name}: dimension {axis} ({dim_name or '?'}) of input "
                        f"{spec.name!r} is dynamic but neither the model card nor the ONNX "
                        f"metadata ({META_DYNAMIC_DIMS}) gives its min/opt/max")
                mins.append(r.min), opts.append(r.opt), maxs.append(r.max)
            out[spec.name] = (tuple(mins), tuple(opts), tuple(maxs))
        return out

    def profile_key(self) -> str:
        """Stable text of the profile for cache keys (``""`` when it cannot be formed)."""
        try:
            return json.dumps(self.profile(), sort_keys=True)
        except Exception:  # noqa: BLE001 - any failure means "no profile"
            return ""

    def example_feeds(self, batch: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
        """Random standard-normal feeds at the profile's opt shape (or ``batch`` on axis 0).

        Used only when a model ships no validation/calibration set.
        """
        rng = np.random.default_rng(seed)
        feeds = {}
        for spec in self.inputs:
            shape = []
            for axis, (size, dim_name) in enumerate(zip(spec.shape, spec.dim_names)):
                if size is None:
                    r = self.dynamic_dims.get(f"{spec.name}:{axis}") or self.dynamic_dims.get(dim_name or "")
                    size = r.opt if r else 1
                    if axis == 0 and batch is not None:
                        size = batch
                shape.append(size)
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        return feeds


def local_data_sets_dir() -> Path:
    """Where data sets made on this machine live: ``user_data_dir()/datasets``.

    For models whose sets are made from recordings that may not be shipped (the
    landmark engines' real face crops, ``training/landmarks/make_sets.py``).
    """
    from avatar_app.inference.dirs import user_data_dir

    return user_data_dir() / "datasets"


def data_set_path(model_path: Path, kind: str) -> Path:
    """``<stem>.<kind>.npz`` beside the model if it exists, else in :func:`local_data_sets_dir` if it
    exists there, else the path beside the model (which does not exist)."""
    beside = model_path.with_name(f"{model_path.stem}.{kind}.npz")
    local = local_data_sets_dir() / beside.name
    return local if not beside.is_file() and local.is_file() else beside


def _spec(value_info) -> TensorSpec:
    ttype = value_info.type.tensor_type
    dtype = _ONNX_DTYPES.get(ttype.elem_type)
    if dtype is None:
        raise ModelLoadError(f"tensor {value_info.name!r} has unsupported ONNX type {ttype.elem_type}")
    shape, names = [], []
    for d in ttype.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(int(d.dim_value)), names.append(None)
        else:
            shape.append(None), names.append(d.dim_param or None)
    return TensorSpec(value_info.name, np.dtype(dtype), tuple(shape), tuple(names))


def _json_meta(meta: Mapping[str, str], key: str, path: Path):
    if key not in meta:
        return None
    try:
        return json.loads(meta[key])
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path}: metadata {key!r} is not valid JSON: {exc}") from exc


def load_feed_set(path: Path, inputs: tuple[TensorSpec, ...]) -> dict[str, np.ndarray]:
    """Load a ``.npz`` data set: one array per input, samples stacked on axis 0.

    Raises:
        InputError: unreadable file, missing input, wrong dtype or mismatched counts.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"data set {path} cannot be read: {exc}", path) from exc
    out = {}
    for spec in inputs:
        if spec.name not in data:
            raise InputError(f"data set {path} has no array for input {spec.name!r} "
                             f"(it has {sorted(data)})", path)
        arr = np.asarray(data[spec.name])
        if arr.ndim != len(spec.shape):
            raise InputError(f"data set {path}: {spec.name!r} has shape {arr.shape}, "
                             f"the model wants {spec.shape_str()}", path)
        out[spec.name] = arr.astype(spec.dtype, copy=False)
    counts = {a.shape[0] for a in out.values()}
    if len(counts) != 1:
        raise InputError(f"data set {path}: inputs have different sample counts {counts}", path)
    return out


def iter_batches(data: Mapping[str, np.ndarray], batch: int = 1):
    """Yield feed dicts of up to ``batch`` samples (axis 0) from a data set."""
    n = next(iter(data.values())).shape[0]
    for i in range(0, n, batch):
        yield {k: np.ascontiguousarray(v[i:i + batch]) for k, v in data.items()}
