"""Precision conversion: the precision lives in the ONNX file.

TensorRT 11 and TensorRT for RTX build strongly typed networks (no FP16/INT8
builder flags), so:

- FP16 is a float16 ONNX that keeps float32 inputs and outputs, made with
  onnxconverter-common's ``float16.convert_float_to_float16(keep_io_types=True)``.
- INT8 is a QDQ ONNX from ``onnxruntime.quantization.quantize_static`` with
  symmetric activations and weights (TensorRT requires zero points of 0),
  per-channel weights and entropy or percentile calibration. Q/DQ pairs go on
  the inputs of the weighted layers only (Conv, ConvTranspose, Gemm, MatMul),
  as NVIDIA's TensorRT guide recommends ("Q/DQ Layer-Placement
  Recommendations": quantize all inputs of weighted operations; do not quantize
  their outputs by default); every other operator runs in float.

INT8 is mixed precision when it has to be: :func:`quantize_int8_mixed` keeps
the layers a model card names (``int8_exclude``) in float and, when the
fully quantised model misses its accuracy target on the *calibration* samples,
runs a layer-wise sensitivity search (partial quantisation, Wu et al.,
"Integer Quantization for Deep Learning Inference: Principles and Empirical
Evaluation", NVIDIA 2020, arXiv:2004.09602, section 5.1): each weighted layer
is quantised alone and its output error measured on a few calibration samples
(a ranking); the longest least-sensitive-first run of layers whose error stays
within the target is then found by bisection, and the rest stay float.
Calibration runs once for all of it (ONNX Runtime's calibration cache). The
validation set is never used for the choice, so the engine layer's verification
(:mod:`avatar_app.inference.verify`) stays an independent check. TensorRT runs
such partially quantised QDQ graphs as mixed precision (layers without Q/DQ
inputs run in the network's float type), and ONNX Runtime's CPU provider runs
INT8 kernels only where Q/DQ pairs are.

ONNX Runtime runs all three files directly. For its CPU provider on an x86-64
CPU without VNNI the weights are quantised to 7 bits (``reduce_range=True``):
ONNX Runtime's x86 INT8 kernels multiply u8 x s8 with ``VPMADDUBSW`` there, whose
16-bit pair sums saturate with full 8-bit weights (ONNX Runtime's quantization
docs, "When and why do I need to try U8U8?" / ``reduce_range``: "7-bit
quantization for better accuracy on non-VNNI CPUs"). See :func:`int8_reduce_range`.
"""
from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import inspect
import io
import json
import logging
import platform
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, EngineBuildError, ModelLoadError
from avatar_app.inference.base import Precision
from avatar_app.inference.int8_search import ErrorMeter, sensitivity_search
from avatar_app.inference.modelinfo import iter_batches

logger = logging.getLogger(__name__)

#: Calibration methods accepted by :func:`quantize_int8`.
CALIBRATION_METHODS = ("entropy", "percentile", "minmax")

#: Op types whose inputs get Q/DQ pairs: TensorRT's weighted layers (TensorRT
#: developer guide, "Q/DQ Layer-Placement Recommendations").
WEIGHTED_OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul")

#: Fraction of the INT8 tolerance the sensitivity search aims for on the
#: calibration samples; the rest is headroom for unseen (validation) data,
#: whose worst case is larger than the calibration samples' (measured up to
#: 1.5x on the shipped models).
INT8_SEARCH_MARGIN = 0.5

#: Version of the INT8 recipe (placement, calibration, search). Part of
#: :meth:`Int8Recipe.fingerprint`, so engines made by an older recipe get new cache keys.
INT8_RECIPE_VERSION = 3

#: /proc/cpuinfo flags (Linux) of the x86 VNNI extensions: AVX512-VNNI and AVX-VNNI (the
#: kernel spells the latter ``avx_vnni``; ``avxvnni`` is accepted too).
VNNI_CPU_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "avxvnni"})

#: numpy ``__cpu_features__`` names implying VNNI (AVX512_CLX and later groups include it).
VNNI_NUMPY_FEATURES = ("AVX512VNNI", "AVXVNNI", "AVX512_CLX", "AVX512_ICL", "AVX512_SPR")

#: Manifest text of an INT8 file quantised with ``reduce_range`` (Engines panel build details).
REDUCED_RANGE_NOTE = "7-bit weights (CPU without VNNI)"

#: ONNX metadata key of the INT8 file: JSON of :meth:`Int8Result.to_json` (float layers, errors).
META_INT8 = "avatar_app.int8"


def _is_x86(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64", "x64", "i386", "i686", "x86")


def _numpy_cpu_features() -> dict | None:
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as feats
        except ImportError:
            return None
    return dict(feats)


def _proc_cpuinfo_flags(path: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(val.split())
    return flags or None


def cpu_has_vnni(*, cpuinfo_flags: Iterable[str] | None = None, numpy_features: Mapping[str, bool] | None = None,
                 machine: str | None = None) -> bool | None:
    """Whether this x86 CPU has VNNI (AVX512-VNNI or AVX-VNNI) INT8 dot-product instructions.

    Sources, first that answers: Linux ``/proc/cpuinfo`` flags (:data:`VNNI_CPU_FLAGS`),
    then numpy's ``__cpu_features__`` (:data:`VNNI_NUMPY_FEATURES`; numpy reports what
    the CPU and OS support at run time). The arguments inject those features (tests);
    when one is None it is read from this machine.

    Args:
        cpuinfo_flags: the CPU's flags as /proc/cpuinfo lists them.
        numpy_features: numpy's ``__cpu_features__`` dict (name -> bool).
        machine: :func:`platform.machine` value.

    Returns:
        True or False on x86; True on other architectures (ARM's INT8 kernels do not
        saturate this way, so nothing needs avoiding); None when x86 and no source
        could be read (callers pick the safe setting, :func:`int8_reduce_range`).
    """
    machine = platform.machine() if machine is None else machine
    if not _is_x86(machine):
        return True
    flags = _proc_cpuinfo_flags() if cpuinfo_flags is None else set(cpuinfo_flags)
    if flags:
        return bool(VNNI_CPU_FLAGS & {f.lower() for f in flags})
    feats = _numpy_cpu_features() if numpy_features is None else dict(numpy_features)
    if feats:
        return any(bool(feats.get(k)) for k in VNNI_NUMPY_FEATURES)
    return None


def int8_reduce_range(provider: str | None, **features) -> bool:
    """Whether an INT8 file for ``provider`` should be quantised with 7-bit weights.

    True only for ONNX Runtime's CPU provider (``"CPUExecutionProvider"``) on an x86
    CPU that lacks VNNI, where full 8-bit weights saturate ONNX Runtime's INT8
    kernels (module docstring). When VNNI cannot be detected on x86 it is True: the
    7-bit file is correct on every CPU (slightly coarser weights), the 8-bit one
    is wrong without VNNI. TensorRT and GPU providers (``provider`` anything else or
    None) get False: TensorRT runs the QDQ file's full 8-bit weights.

    Args:
        provider: ONNX Runtime execution provider name, or None for a non-ORT backend.
        **features: passed to :func:`cpu_has_vnni` (``cpuinfo_flags``, ``numpy_features``,
            ``machine``) to inject the CPU's features.
    """
    if provider != "CPUExecutionProvider":
        return False
    return cpu_has_vnni(**features) is not True


def convert_fp16(src: Path, dst: Path, op_block_list: Sequence[str] | None = None) -> Path:
    """Write a float16 copy of an FP32 ONNX model that keeps float32 inputs/outputs.

    Args:
        src: FP32 .onnx file.
        dst: output .onnx path.
        op_block_list: op types kept in float32 (onnxconverter-common's default list
            when None).

    Returns:
        ``dst``.

    Raises:
        BackendUnavailableError: onnx / onnxconverter-common are not installed.
        EngineBuildError: the conversion failed.
    """
    try:
        import onnx
        from onnxconverter_common import float16
    except ImportError as exc:
        raise BackendUnavailableError(
            f"FP16 conversion needs onnx and onnxconverter-common: {exc}") from exc
    try:
        model = onnx.load(str(src))
        _detach_consumed_outputs(model)
        kwargs = {"keep_io_types": True}
        if op_block_list is not None:
            kwargs["op_block_list"] = list(op_block_list)
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m16 = float16.convert_float_to_float16(model, **kwargs)
        for w in caught:  # e.g. weights clamped to the float16 range
            logger.warning("FP16 conversion of %s: %s", src.name, w.message)
        onnx.save(m16, str(dst))
    except Exception as exc:  # noqa: BLE001 - onnx and the converter raise assorted types
        raise EngineBuildError(f"FP16 conversion of {src.name} failed: {exc}") from exc
    return dst


def _detach_consumed_outputs(model) -> None:
    """Give every graph output that other nodes also read an Identity of its own.

    ``convert_float_to_float16(keep_io_types=True)`` casts each graph output back to
    float32 under its original name; a node inside the graph that reads that name then
    gets float32 while the converter typed its result float16, and ONNX Runtime refuses
    the file ("Type (tensor(float16)) of output arg ... does not match"). Consumers are
    pointed at an internal copy, so the cast only feeds the output. Modifies ``model``.
    """
    import onnx

    outputs = {o.name for o in model.graph.output}
    consumed = {i for n in model.graph.node for i in n.input} & outputs
    for name in sorted(consumed):
        inner = f"{name}__inner"
        for n in model.graph.node:
            for k, i in enumerate(n.output):
                if i == name:
                    n.output[k] = inner
            for k, i in enumerate(n.input):
                if i == name:
                    n.input[k] = inner
        model.graph.node.append(onnx.helper.make_node("Identity", [inner], [name], name=f"{name}__output"))


class FeedSetReader:
    """``onnxruntime.quantization.CalibrationDataReader`` over data sets.

    Args:
        sets: data sets, each a dict of input name to array stacked on axis 0
            (the shipped default set and the user's recorded samples).
        batch: samples per calibration feed.
        limit: stop after this many samples in total (None: all).
    """

    def __init__(self, sets: Iterable[Mapping[str, np.ndarray]], batch: int = 1,
                 limit: int | None = None):
        self._sets = [dict(s) for s in sets if s]
        self.batch = batch
        self.limit = limit
        self.rewind()

    @property
    def num_samples(self) -> int:
        """Samples the reader yields in one pass."""
        n = sum(next(iter(s.values())).shape[0] for s in self._sets)
        return min(n, self.limit) if self.limit is not None else n

    def rewind(self) -> None:
        """Start again from the first sample."""
        self._iter = self._gen()

    def _gen(self):
        seen = 0
        for data in self._sets:
            for feed in iter_batches(data, self.batch):
                if self.limit is not None and seen >= self.limit:
                    return
                seen += next(iter(feed.values())).shape[0]
                yield feed

    def get_next(self) -> dict[str, np.ndarray] | None:
        """Next feed dict, or None at the end (the ORT calibration protocol)."""
        return next(self._iter, None)

    def batches(self, batch: int, limit: int | None = None):
        """Yield feed dicts of up to ``batch`` samples over all sets (independent of ``get_next``).

        Args:
            batch: samples per feed (a feed never spans two sets).
            limit: stop after this many samples (None: the reader's own limit).
        """
        limit = self.limit if limit is None else min(limit, self.limit or limit)
        seen = 0
        for data in self._sets:
            for feed in iter_batches(data, batch):
                if limit is not None and seen >= limit:
                    return
                n = next(iter(feed.values())).shape[0]
                if limit is not None and seen + n > limit:
                    feed = {k: v[:limit - seen] for k, v in feed.items()}
                    n = limit - seen
                seen += n
                yield feed


@dataclass(frozen=True)
class Int8Recipe:
    """How :func:`quantize_int8_mixed` makes an INT8 file.

    Attributes:
        method: calibration method, one of :data:`CALIBRATION_METHODS`.
        percentile: percentile of |activation| kept by the ``"percentile"`` method.
        op_types: op types whose inputs are quantised (None: every op type ONNX
            Runtime can quantise, its own default).
        quantize_outputs: also quantise the outputs of ``op_types`` (off, as TensorRT recommends).
        exclude: node names or :mod:`fnmatch` patterns (``"/model/head/*"``) kept in
            float whatever the search finds; names are those of the graph after
            ONNX Runtime's quantisation pre-processing (listed in the INT8 file's metadata).
        search: run the sensitivity search when the quantised model misses the target.
        margin: target = ``margin`` x tolerance, on the calibration samples.
        max_selection_samples: calibration samples used to measure errors in the search.
        sensitivity_samples: calibration samples the per-layer sensitivity ranking is
            measured on (the chosen split is checked on all ``max_selection_samples``).
        max_candidates: rank at most this many layers (largest weights first); the
            others stay float (None: all).
        reduce_range: 7-bit weights (``quantize_static(reduce_range=True)``), for ONNX
            Runtime's CPU provider on x86 without VNNI (:func:`int8_reduce_range`).
    """

    method: str = "percentile"
    percentile: float = 99.999
    op_types: tuple[str, ...] | None = WEIGHTED_OP_TYPES
    quantize_outputs: bool = False
    exclude: tuple[str, ...] = ()
    search: bool = True
    margin: float = INT8_SEARCH_MARGIN
    max_selection_samples: int = 2048
    sensitivity_samples: int = 16
    max_candidates: int | None = None
    reduce_range: bool = False

    def __post_init__(self):
        if self.method not in CALIBRATION_METHODS:
            raise EngineBuildError(f"unknown calibration method {self.method!r}; "
                                   f"use one of {CALIBRATION_METHODS}")
        if not 0 < self.margin <= 1:
            raise EngineBuildError(f"INT8 search margin must be in (0, 1], got {self.margin}")
        if self.sensitivity_samples < 1 or (self.max_candidates is not None and self.max_candidates < 1):
            raise EngineBuildError(f"INT8 search needs sensitivity_samples and max_candidates >= 1, got "
                                   f"{self.sensitivity_samples} and {self.max_candidates}")

    @classmethod
    def from_card(cls, card: Mapping | None, method: str = "percentile", *,
                  reduce_range: bool = False) -> "Int8Recipe":
        """The recipe a model card asks for.

        Card keys (all optional): ``int8_exclude`` (list of node names or patterns kept
        float), ``int8_search`` (bool, default true), ``int8_op_types`` (list of op types
        to quantise, default :data:`WEIGHTED_OP_TYPES`), ``int8_margin`` (the search's
        target as a fraction of the tolerance, in (0, 1], default :data:`INT8_SEARCH_MARGIN`;
        smaller keeps more layers in float, for outputs that are thresholded downstream),
        ``int8_max_candidates`` (positive int: the search ranks only that many layers,
        largest weights first, the rest stay float; default all). ``reduce_range``
        comes from the target backend, not the card (:func:`int8_reduce_range`).

        Raises:
            ModelLoadError: a key has the wrong type.
        """
        card = card or {}
        exclude = card.get("int8_exclude", [])
        op_types = card.get("int8_op_types", list(WEIGHTED_OP_TYPES))
        search = card.get("int8_search", True)
        for key, val in (("int8_exclude", exclude), ("int8_op_types", op_types)):
            if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
                raise ModelLoadError(f"model card of {card.get('name', 'the model')}: {key!r} must be "
                                     f"a list of strings, got {val!r}")
        if not isinstance(search, bool):
            raise ModelLoadError(f"model card of {card.get('name', 'the model')}: 'int8_search' must "
                                 f"be true or false, got {search!r}")
        margin = card.get("int8_margin", INT8_SEARCH_MARGIN)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin <= 1:
            raise ModelLoadError(f"model card of {card.get('name', 'the model')}: 'int8_margin' must "
                                 f"be a number in (0, 1], got {margin!r}")
        cap = card.get("int8_max_candidates")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ModelLoadError(f"model card of {card.get('name', 'the model')}: 'int8_max_candidates' "
                                 f"must be a positive integer, got {cap!r}")
        return cls(method=method, exclude=tuple(exclude), search=search,
                   op_types=tuple(op_types) if op_types else None, margin=float(margin), max_candidates=cap,
                   reduce_range=bool(reduce_range))

    def fingerprint(self) -> str:
        """Hex digest of the recipe and :data:`INT8_RECIPE_VERSION` (for cache keys).

        ``reduce_range`` enters only when True, so the 8-bit recipes keep their digests.
        """
        d = asdict(self)
        if not d["reduce_range"]:
            del d["reduce_range"]
        text = json.dumps({"version": INT8_RECIPE_VERSION, **d}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Int8Result:
    """What :func:`quantize_int8_mixed` made.

    Attributes:
        path: the written INT8 .onnx file.
        quantized_nodes: nodes whose inputs are quantised (INT8 layers).
        float_nodes: candidate nodes left in float (card exclusions and search).
        selection_error: output name to the max abs error vs FP32 on the selection
            (calibration) samples.
        target: max abs error the search aimed for (margin x tolerance).
        tolerance: the model's INT8 tolerance.
        sensitivity: node to max abs output error with only that node quantised
            (empty when no search ran).
        quantizations: quantised models made (1 without a search).
        samples: calibration samples the errors were measured on.
        searched: whether the sensitivity search ran.
    """

    path: Path
    quantized_nodes: tuple[str, ...]
    float_nodes: tuple[str, ...]
    selection_error: dict[str, float]
    target: float
    tolerance: float
    sensitivity: dict[str, float] = field(default_factory=dict)
    quantizations: int = 1
    samples: int = 0
    searched: bool = False

    @property
    def max_error(self) -> float:
        """Largest of :attr:`selection_error` (0 when there are no outputs)."""
        return max(self.selection_error.values(), default=0.0)

    def to_json(self) -> dict:
        """JSON-serialisable dict (the path as a string)."""
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def _ort_quantization():
    try:
        from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise BackendUnavailableError(f"INT8 quantisation needs onnxruntime.quantization: {exc}") from exc
    return CalibrationMethod, QuantFormat, QuantType, quantize_static, quant_pre_process


class _Quantizer:
    """Pre-processes a model once, calibrates once, and writes QDQ files for any exclusion set.

    The calibration ranges are computed on the first call and reused through
    ``quantize_static``'s ``calibration_cache_path`` (ONNX Runtime >= 1.22); older
    versions calibrate on every call (slower, same result).
    """

    def __init__(self, src: Path, reader: FeedSetReader, recipe: Int8Recipe, workdir: Path):
        import onnx

        self.src = Path(src)
        self.reader = reader
        self.recipe = recipe
        self.workdir = workdir
        self.count = 0
        (self._cal_enum, self._fmt, self._qtype, self._quantize_static,
         quant_pre_process) = _ort_quantization()
        pre = workdir / "pre.onnx"
        try:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            model = onnx.load(str(pre))
        except Exception as exc:  # noqa: BLE001 - optional optimisation step; fall back to the source
            logger.warning("quantisation pre-processing of %s skipped: %s", self.src.name, exc)
            model = onnx.load(str(src))
        # nodes_to_exclude works by name: give unnamed nodes stable names.
        used = {n.name for n in model.graph.node if n.name}
        for i, node in enumerate(model.graph.node):
            if not node.name:
                name = f"{node.op_type}_{i}"
                while name in used:
                    name += "_"
                node.name = name
                used.add(name)
        onnx.save(model, str(pre))
        self.pre = pre
        types = recipe.op_types
        if types is None:
            from onnxruntime.quantization.registry import QDQRegistry

            types = tuple(QDQRegistry)
        self.candidates = tuple(n.name for n in model.graph.node if n.op_type in types)
        sizes = {i.name: int(np.prod(i.dims)) for i in model.graph.initializer}
        self.weights = {n.name: sum(sizes.get(i, 0) for i in n.input) for n in model.graph.node
                        if n.name in self.candidates}
        self.pinned = tuple(n for n in self.candidates
                            if any(fnmatch.fnmatchcase(n, pat) for pat in recipe.exclude))
        unmatched = [pat for pat in recipe.exclude
                     if not any(fnmatch.fnmatchcase(n.name, pat) for n in model.graph.node)]
        if unmatched:
            logger.warning("INT8 exclusions of %s match no node: %s", self.src.name, unmatched)
        self._cache = workdir / "calibration.json"
        self._has_cache = "calibration_cache_path" in inspect.signature(self._quantize_static).parameters

    @property
    def free(self) -> tuple[str, ...]:
        """Candidates the search may quantise (not pinned to float by the recipe)."""
        return tuple(n for n in self.candidates if n not in self.pinned)

    def ranked(self, limit: int | None) -> list[str]:
        """The free candidates, largest weights first (ties in graph order), at most ``limit``."""
        order = sorted(self.free, key=lambda n: -self.weights[n])
        return order if limit is None else order[:limit]

    def quantize(self, dst: Path, float_nodes: Iterable[str]) -> Path:
        """Write the QDQ model with ``float_nodes`` (plus the pinned ones) left in float.

        Raises:
            EngineBuildError: ONNX Runtime failed.
        """
        r = self.recipe
        cal = {"entropy": self._cal_enum.Entropy, "percentile": self._cal_enum.Percentile,
               "minmax": self._cal_enum.MinMax}[r.method]
        # QuantizeBias False: biases stay float. An int32 bias behind DequantizeLinear is
        # valid ONNX but TensorRT's parser rejects it (DQ input must be 8-bit or smaller).
        # DedicatedQDQPair: a tensor read by several layers gets one Q/DQ pair per
        # quantised reader, so a layer left float reads the float tensor.
        extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                 "DedicatedQDQPair": True}
        if r.method == "percentile":
            extra["CalibPercentile"] = r.percentile
        if r.op_types is not None and not r.quantize_outputs:
            extra["OpTypesToExcludeOutputQuantization"] = list(r.op_types)
        kwargs = {}
        if self._has_cache:
            kwargs["calibration_cache_path"] = str(self._cache)
        excluded = sorted(set(self.pinned) | set(float_nodes))
        self.reader.rewind()
        try:
            chatter = io.StringIO()  # the calibrator prints progress to stdout
            with contextlib.redirect_stdout(chatter):
                self._quantize_static(
                    str(self.pre), str(dst), self.reader, quant_format=self._fmt.QDQ,
                    op_types_to_quantize=list(r.op_types) if r.op_types is not None else None,
                    per_channel=True, reduce_range=r.reduce_range, activation_type=self._qtype.QInt8,
                    weight_type=self._qtype.QInt8, calibrate_method=cal,
                    nodes_to_exclude=excluded, extra_options=extra, **kwargs)
            logger.debug("calibration of %s: %s", self.src.name, chatter.getvalue().strip())
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types from here
            raise EngineBuildError(f"INT8 quantisation of {self.src.name} failed: {exc}") from exc
        self.count += 1
        return dst


def _check_qdq(path: Path, src_name: str) -> tuple[str, ...]:
    """Checks a QDQ file for TensorRT and returns the names of its quantised nodes.

    Raises:
        EngineBuildError: no quantised operator or a non-zero zero point.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    nq = sum(n.op_type == "QuantizeLinear" for n in model.graph.node)
    if nq == 0:
        raise EngineBuildError(
            f"INT8 quantisation of {src_name} produced no quantised operator "
            f"(ops: {sorted({n.op_type for n in model.graph.node})}); use FP16 or FP32")
    bad = [i.name for i in model.graph.initializer
           if "zero_point" in i.name and np.any(onnx.numpy_helper.to_array(i) != 0)]
    if bad:
        raise EngineBuildError(f"INT8 quantisation of {src_name} left non-zero zero points: {bad[:3]}")
    dq_out = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return tuple(n.name for n in model.graph.node
                 if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                 and any(i in dq_out for i in n.input))


def quantize_int8(src: Path, dst: Path, reader: FeedSetReader, method: str = "percentile",
                  percentile: float = 99.999, *, op_types: Sequence[str] | None = WEIGHTED_OP_TYPES,
                  nodes_to_exclude: Sequence[str] = (), quantize_outputs: bool = False) -> Path:
    """Write a QDQ INT8 ONNX made by static quantisation of an FP32 model (no search).

    Symmetric activations and weights (zero points 0, as TensorRT requires),
    per-channel weights, float biases, QDQ format; activations calibrated on
    ``reader``. Q/DQ pairs on the inputs of ``op_types`` (see the module docstring).

    Args:
        src: FP32 .onnx file.
        dst: output .onnx path.
        reader: calibration feeds (default set plus user samples).
        method: ``"entropy"``, ``"percentile"`` or ``"minmax"``.
        percentile: percentile for the ``"percentile"`` method.
        op_types: op types to quantise (None: ONNX Runtime's default, every supported op).
        nodes_to_exclude: node names or :mod:`fnmatch` patterns kept in float.
        quantize_outputs: also quantise the outputs of ``op_types``.

    Returns:
        ``dst``.

    Raises:
        BackendUnavailableError: onnxruntime.quantization is not available.
        EngineBuildError: unknown method, empty calibration set, no quantisable
            operator, or a quantisation failure.
    """
    recipe = Int8Recipe(method=method, percentile=percentile,
                        op_types=tuple(op_types) if op_types is not None else None,
                        quantize_outputs=quantize_outputs, exclude=tuple(nodes_to_exclude), search=False)
    if reader.num_samples == 0:
        raise EngineBuildError(f"INT8 calibration of {Path(src).name} needs calibration samples; none found")
    with tempfile.TemporaryDirectory(prefix="avatar_quant_") as tmp:
        _Quantizer(Path(src), reader, recipe, Path(tmp)).quantize(Path(dst), ())
    _check_qdq(Path(dst), Path(src).name)
    return Path(dst)


def quantize_int8_mixed(src: Path, dst: Path, reader: FeedSetReader, tolerance: float,
                        recipe: Int8Recipe | None = None) -> Int8Result:
    """Write an INT8 QDQ ONNX, leaving the layers that break the accuracy target in float.

    1. Quantise every candidate layer (``recipe.op_types``) except the recipe's
       ``exclude`` list; measure the max abs output error against FP32 on the
       calibration samples. Within ``recipe.margin`` x ``tolerance``: done.
    2. Otherwise (and ``recipe.search``):
       :func:`~avatar_app.inference.int8_search.sensitivity_search` ranks the
       candidates by their error when quantised alone and keeps the longest
       least-sensitive-first prefix within the target in INT8 (partial
       quantisation after Wu et al. 2020, section 5.1).

    Costs 1 quantisation, or about (number of candidate layers) + log2 of it + 1
    with the search; calibration runs once. The errors are measured on the
    calibration samples only, with ONNX Runtime CPU's INT8 kernels, except for an
    8-bit recipe on an x86 CPU without VNNI (a TensorRT file: ONNX Runtime CPU gets
    ``recipe.reduce_range`` there, :func:`int8_reduce_range`), measured with the QDQ
    graph's own arithmetic (:class:`~avatar_app.inference.int8_search.ErrorMeter`'s ``simulate_qdq``).

    Args:
        src: FP32 .onnx file.
        dst: output .onnx path; its metadata ``avatar_app.int8`` records the result.
        reader: calibration feeds (default set plus user samples).
        tolerance: the model's INT8 tolerance (max abs error).
        recipe: placement, calibration and search settings (default :class:`Int8Recipe`).

    Returns:
        The :class:`Int8Result` (the file may still fail verification when ``search``
        is off or the validation data differ from the calibration data).

    Raises:
        BackendUnavailableError: onnxruntime.quantization is not available.
        EngineBuildError: empty calibration set, no quantisable operator, a
            quantisation failure, or no layer can be quantised within the target.
    """
    import onnx

    recipe = recipe or Int8Recipe()
    src, dst = Path(src), Path(dst)
    if reader.num_samples == 0:
        raise EngineBuildError(f"INT8 calibration of {src.name} needs calibration samples; none found")
    target = recipe.margin * float(tolerance)
    with tempfile.TemporaryDirectory(prefix="avatar_quant_") as tmp:
        work = Path(tmp)
        q = _Quantizer(src, reader, recipe, work)
        if not q.free:
            raise EngineBuildError(
                f"INT8 quantisation of {src.name}: no layer of the types {recipe.op_types} is left to "
                f"quantise (card exclusions: {list(recipe.exclude)}); use FP16 or FP32")
        # an 8-bit file on a CPU whose INT8 kernels saturate is for TensorRT (ORT CPU gets
        # reduce_range here): measure the QDQ arithmetic TensorRT runs, not those kernels
        simulate = not recipe.reduce_range and cpu_has_vnni() is not True
        meter = ErrorMeter(src, list(reader.batches(64, recipe.max_selection_samples)), simulate)
        best = q.quantize(work / "full.onnx", ())
        _check_qdq(best, src.name)
        best_err, float_nodes, sens = meter(best), (), {}
        logger.info("INT8 %s, all %d candidate layers quantised: max abs error %.3g on %d calibration "
                    "samples (target %.3g)", src.name, len(q.free), max(best_err.values(), default=0.0),
                    meter.samples, target)
        if max(best_err.values(), default=0.0) > target and recipe.search:
            best, best_err, kept, sens = sensitivity_search(q, meter, work, target, tolerance)
            float_nodes = tuple(n for n in q.free if n not in kept)
        quantized = _check_qdq(best, src.name)
        result = Int8Result(dst, quantized, tuple(q.pinned) + float_nodes, best_err, target,
                            float(tolerance), sens, q.count, meter.samples, bool(sens))
        model = onnx.load(str(best))
        meta = {p.key: p.value for p in model.metadata_props}
        meta[META_INT8] = json.dumps({**result.to_json(), "recipe": recipe.fingerprint(),
                                      "reduce_range": recipe.reduce_range})
        onnx.helper.set_model_props(model, meta)
        onnx.save(model, str(work / "final.onnx"))
        shutil.move(str(work / "final.onnx"), str(dst))
    return result


def int8_summary(path: Path) -> dict | None:
    """Which weighted layers of an INT8 ONNX file are quantised and which stayed float.

    Read from the ``avatar_app.int8`` metadata that :func:`quantize_int8_mixed` writes.

    Args:
        path: an .onnx file (other files, e.g. TensorRT plans, give None).

    Returns:
        ``{"quantized_layers": int, "float_layers": int, "quantized_nodes": [names],
        "float_nodes": [names], "sensitivity": {name: max abs error with that layer
        alone quantised}, "calibration_max_abs": float}`` (the largest output error of
        the chosen split on the calibration samples), or None when ``path`` is not an ONNX
        file or carries no such metadata.
    """
    import onnx

    path = Path(path)
    if path.suffix != ".onnx" or not path.is_file():
        return None
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    if META_INT8 not in meta:
        return None
    d = json.loads(meta[META_INT8])
    floats = list(dict.fromkeys(d["float_nodes"]))
    # a float layer that shares its input with a quantised one reads the same Q/DQ'd activation,
    # so it can be listed in both; it counts as float (its weights are)
    quantized = [n for n in dict.fromkeys(d["quantized_nodes"]) if n not in floats]
    return {"quantized_layers": len(quantized), "float_layers": len(floats), "quantized_nodes": quantized,
            "float_nodes": floats, "sensitivity": dict(d.get("sensitivity", {})),
            "calibration_max_abs": max(d["selection_error"].values(), default=0.0)}


def convert(src: Path, dst: Path, precision: Precision, reader: FeedSetReader | None = None,
            method: str = "percentile", *, card: Mapping | None = None,
            tolerance: float | None = None, reduce_range: bool = False) -> Path:
    """Write the ONNX file of ``precision`` (FP32 is copied unchanged).

    INT8 goes through :func:`quantize_int8_mixed` with the recipe of the model card
    (:meth:`Int8Recipe.from_card`) and the card's INT8 tolerance.

    Args:
        src: FP32 .onnx file.
        dst: output .onnx path.
        precision: target precision.
        reader: calibration feeds (INT8 only).
        method: calibration method (INT8 only).
        card: model-card dict (default: ``<stem>.card.json`` beside ``src``).
        tolerance: INT8 max abs error allowed (default: from the card / ONNX metadata).
        reduce_range: INT8 with 7-bit weights (:func:`int8_reduce_range` of the target backend).

    Raises:
        EngineBuildError, BackendUnavailableError: see :func:`convert_fp16`, :func:`quantize_int8_mixed`.
        ModelLoadError: malformed model card.
    """
    precision = Precision.parse(precision)
    if precision is Precision.FP32:
        dst.write_bytes(Path(src).read_bytes())
        return dst
    if precision is Precision.FP16:
        return convert_fp16(src, dst)
    if reader is None:
        raise EngineBuildError("INT8 conversion needs a calibration data reader")
    from avatar_app.inference.modelinfo import ModelInfo

    info = ModelInfo.from_onnx(src, card)  # reads <stem>.card.json when no card is given
    if tolerance is None:
        tolerance = info.tolerances[Precision.INT8]
    quantize_int8_mixed(src, dst, reader, tolerance, Int8Recipe.from_card(info.card, method, reduce_range=reduce_range))
    return dst
