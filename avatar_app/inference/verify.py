"""Verification of a new engine against the FP32 ONNX Runtime reference.

Every new engine runs the model's validation set; the maximum and mean
absolute error over all outputs are compared with the precision's tolerance
(DEFAULT_TOLERANCES, or stricter ones from the model's metadata). An engine
over tolerance or with a non-finite output is rejected with the reason.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from avatar_app.inference.base import BaseRunner, Precision
from avatar_app.inference.modelinfo import iter_batches

logger = logging.getLogger(__name__)


@dataclass
class VerificationResult:
    """Outcome of :func:`verify`.

    Attributes:
        passed: within tolerance and all outputs finite.
        precision: the candidate's precision value (``"fp16"``).
        tolerance: max absolute error allowed.
        max_abs_error: largest |candidate - reference| over all outputs and samples
            (``inf`` when an output was non-finite).
        mean_abs_error: mean |candidate - reference| over all finite output elements.
        per_output: output name to ``{"max_abs": .., "mean_abs": .., "non_finite": n}``.
        non_finite: count of NaN/Inf values in the candidate's outputs.
        samples: validation samples compared.
        data_source: ``"file"`` (the model's validation set) or ``"synthetic"``.
        reason: why it was rejected ("" when passed).
    """

    passed: bool
    precision: str
    tolerance: float
    max_abs_error: float
    mean_abs_error: float
    per_output: dict[str, dict[str, float]] = field(default_factory=dict)
    non_finite: int = 0
    samples: int = 0
    data_source: str = "file"
    reason: str = ""

    def to_json(self) -> dict:
        """JSON-serialisable dict (non-finite floats written as the strings ``"inf"``/``"nan"``)."""
        return _finite_json(asdict(self))

    @classmethod
    def from_json(cls, d: Mapping) -> "VerificationResult":
        """Inverse of :meth:`to_json`."""
        d = dict(d)
        for k in ("max_abs_error", "mean_abs_error"):
            d[k] = float(d[k])
        return cls(**d)

    def summary(self) -> str:
        """One line: ``fp16 passed: max 3.1e-04 mean 2.0e-05 (tol 1e-02, 64 samples)``."""
        head = f"{self.precision} {'passed' if self.passed else 'REJECTED'}"
        body = (f"max {self.max_abs_error:.2e} mean {self.mean_abs_error:.2e} "
                f"(tol {self.tolerance:.0e}, {self.samples} samples, {self.data_source} data)")
        return f"{head}: {body}" + (f" - {self.reason}" if self.reason else "")


def _finite_json(value):
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else "inf"
    return value


def reference_outputs(reference: BaseRunner, data: Mapping[str, np.ndarray],
                      batch: int = 1) -> list[dict[str, np.ndarray]]:
    """Run the FP32 reference over a data set, one dict per batch."""
    return [reference.infer(feeds) for feeds in iter_batches(data, batch)]


def verify(candidate: BaseRunner, data: Mapping[str, np.ndarray], tolerance: float,
           reference: BaseRunner | None = None,
           expected: list[dict[str, np.ndarray]] | None = None, batch: int = 1,
           data_source: str = "file") -> VerificationResult:
    """Compare an open candidate engine with the FP32 reference on a data set.

    Args:
        candidate: the open engine to check.
        data: validation set, one array per input, samples on axis 0.
        tolerance: max absolute error allowed.
        reference: open FP32 ONNX Runtime runner (used when ``expected`` is None).
        expected: precomputed reference outputs per batch (from :func:`reference_outputs`).
        batch: samples per call.
        data_source: recorded in the result.

    Returns:
        The :class:`VerificationResult` (never raises on a mismatch).
    """
    if expected is None:
        if reference is None:
            raise ValueError("verify needs a reference runner or expected outputs")
        expected = reference_outputs(reference, data, batch)
    per: dict[str, dict[str, float]] = {}
    sums: dict[str, float] = {}
    ref_bad: dict[str, int] = {}
    counts: dict[str, int] = {}
    samples = 0
    for feeds, ref in zip(iter_batches(data, batch), expected):
        got = candidate.infer(feeds)
        samples += next(iter(feeds.values())).shape[0]
        for name, ref_arr in ref.items():
            if name not in got:
                return VerificationResult(False, candidate.precision.value, tolerance, float("inf"),
                                          float("inf"), samples=samples, data_source=data_source,
                                          reason=f"output {name!r} missing from the engine's outputs")
            out = np.asarray(got[name], dtype=np.float64)
            ref64 = np.asarray(ref_arr, dtype=np.float64)
            if out.shape != ref64.shape:
                return VerificationResult(False, candidate.precision.value, tolerance, float("inf"),
                                          float("inf"), samples=samples, data_source=data_source,
                                          reason=f"output {name!r} has shape {out.shape}, "
                                                 f"reference {ref64.shape}")
            finite = np.isfinite(out)
            err = np.abs(out - ref64)
            st = per.setdefault(name, {"max_abs": 0.0, "mean_abs": 0.0, "non_finite": 0})
            st["non_finite"] += int(out.size - finite.sum())
            ref_bad[name] = ref_bad.get(name, 0) + int((~np.isfinite(ref64)).sum())
            if finite.any():
                st["max_abs"] = max(st["max_abs"], float(err[finite].max()))
            sums[name] = sums.get(name, 0.0) + float(err[finite].sum())
            counts[name] = counts.get(name, 0) + int(finite.sum())
    for name, st in per.items():
        st["mean_abs"] = sums[name] / max(counts[name], 1)
        if st["non_finite"]:
            st["max_abs"] = float("inf")
    non_finite = int(sum(st["non_finite"] for st in per.values()))
    max_abs = max((st["max_abs"] for st in per.values()), default=0.0)
    mean_abs = sum(sums.values()) / max(sum(counts.values()), 1)
    if non_finite:
        bad = [n for n, st in per.items() if st["non_finite"]]
        if any(ref_bad.get(n, 0) for n in bad):
            # the float32 reference is not finite either: the model itself is broken, not the precision
            reason = (f"{non_finite} non-finite output values (NaN/Inf) in {bad}, and the float32 "
                      "reference gives NaN/Inf there too: the model's weights or inputs are broken "
                      "(re-export or reinstall the model)")
        else:
            reason = (f"{non_finite} non-finite output values (NaN/Inf) in {bad}; "
                      f"likely an overflow of the {candidate.precision.value} range")
    elif max_abs > tolerance:
        worst = max(per, key=lambda n: per[n]["max_abs"])
        reason = (f"max abs error {max_abs:.3g} on output {worst!r} exceeds the "
                  f"{candidate.precision.value} tolerance {tolerance:g}")
    else:
        reason = ""
    result = VerificationResult(not reason, candidate.precision.value, tolerance, max_abs, mean_abs,
                                per, non_finite, samples, data_source, reason)
    log = logger.info if result.passed else logger.warning
    log("verification of %s: %s", candidate.describe(), result.summary())
    return result


#: Largest finite float16 value (IEEE 754 binary16).
FP16_MAX = 65504.0


def fp16_range_violations(model_path, data: Mapping[str, np.ndarray], limit: float = FP16_MAX,
                          max_samples: int = 64) -> list[tuple[str, float]]:
    """Intermediate tensors of the FP32 model whose magnitude leaves the float16 range.

    ONNX Runtime's CPU provider has no float16 kernels for most arithmetic: it
    casts an FP16 graph back to float32 around them, so running the FP16 file
    on the CPU cannot show an overflow that a GPU (TensorRT, CUDA) would hit.
    This check runs the FP32 model with every float tensor exposed, on the
    validation set, and lists those whose max |value| exceeds ``limit``.

    Args:
        model_path: the FP32 ONNX file.
        data: validation set (samples on axis 0).
        limit: the float16 maximum.
        max_samples: samples used (the first ones).

    Returns:
        (tensor name, max |value|) for each tensor over the limit (non-finite
        values count as inf), largest first; weights over the limit are listed too.
    """
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    out: dict[str, float] = {}
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            arr = numpy_helper.to_array(init)
            if arr.size and float(np.abs(arr).max()) > limit:
                out[init.name] = float(np.abs(arr).max())
    inferred = onnx.shape_inference.infer_shapes(model)
    float_names = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                   if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    existing = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name in float_names and name not in existing:
                model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    n = min(next(iter(data.values())).shape[0], max_samples)
    feeds = {k: np.ascontiguousarray(v[:n]) for k, v in data.items()}
    for feed in iter_batches(feeds, 8):
        for name, arr in zip(names, sess.run(names, feed)):
            if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f" or arr.size == 0:
                continue
            peak = float(np.abs(arr).max()) if np.isfinite(arr).all() else float("inf")
            if peak > limit:
                out[name] = max(out.get(name, 0.0), peak)
    return sorted(out.items(), key=lambda kv: -kv[1])


def range_rejection(precision: str, violations: list[tuple[str, float]], tolerance: float,
                    samples: int, data_source: str) -> VerificationResult:
    """A failed :class:`VerificationResult` for float16 range violations."""
    shown = ", ".join(f"{n!r} reaches {v:.3g}" for n, v in violations[:3])
    more = f" and {len(violations) - 3} more" if len(violations) > 3 else ""
    reason = (f"intermediate values exceed the float16 maximum {FP16_MAX:g}: {shown}{more}; "
              "a float16 engine would overflow to inf/NaN")
    per = {n: {"fp32_peak_abs": v} for n, v in violations[:10]}
    return VerificationResult(False, precision, tolerance, float("inf"), float("inf"), per, 0,
                              samples, data_source, reason)


def tolerance_for(precision: Precision, tolerances: Mapping[Precision, float]) -> float:
    """The tolerance of ``precision`` from a model's tolerance table."""
    return float(tolerances[Precision.parse(precision)])
