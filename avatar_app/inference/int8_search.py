"""The INT8 sensitivity search of :func:`avatar_app.inference.precision.quantize_int8_mixed`.

Partial quantisation after Wu et al., "Integer Quantization for Deep Learning
Inference: Principles and Empirical Evaluation" (NVIDIA 2020, arXiv:2004.09602,
section 5.1): rank the weighted layers by the output error each gives when it
alone is quantised, then keep the least sensitive ones in INT8 while the whole
model stays within the accuracy target. Errors are max abs differences from the
FP32 model on calibration samples (ONNX Runtime CPU, one thread). For a file
that will not run on ONNX Runtime's CPU INT8 kernels (TensorRT) on a CPU whose
kernels saturate (x86 without VNNI), the meter runs the QDQ graph as written
(ONNX Runtime's QDQ fusion off: quantise, dequantise, float operator), the
arithmetic TensorRT carries out, instead of those saturating kernels.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from avatar_app.core.errors import EngineBuildError

logger = logging.getLogger(__name__)


#: ONNX Runtime graph transformer that fuses DQ -> op -> Q into integer kernels.
QDQ_FUSION = "QDQSelectorActionTransformer"


class ErrorMeter:
    """Max abs output error of a model file against the FP32 source on fixed feeds.

    Args:
        src: FP32 source .onnx (None: the caller sets ``reference``).
        feeds: input dicts, arrays batched along axis 0.
        simulate_qdq: run candidates with :data:`QDQ_FUSION` disabled (the QDQ
            graph's own arithmetic, as TensorRT runs it) rather than ONNX Runtime's
            CPU integer kernels.
    """

    def __init__(self, src: Path | None, feeds: list[dict[str, np.ndarray]], simulate_qdq: bool = False):
        self.simulate_qdq = simulate_qdq
        self.feeds = feeds
        self.samples = sum(next(iter(f.values())).shape[0] for f in feeds)
        self.reference = self._run(src) if src is not None else []

    def subset(self, samples: int) -> "ErrorMeter":
        """A meter over the first ``samples`` samples, reusing this one's reference outputs."""
        feeds, refs, left = [], [], samples
        for f, r in zip(self.feeds, self.reference):
            if left <= 0:
                break
            feeds.append({k: v[:left] for k, v in f.items()})
            refs.append({k: v[:left] for k, v in r.items()})
            left -= next(iter(f.values())).shape[0]
        sub = ErrorMeter(None, feeds, self.simulate_qdq)
        sub.reference = refs
        return sub

    def _session(self, path: Path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        extra = {"disabled_optimizers": [QDQ_FUSION]} if self.simulate_qdq else {}
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], **extra)

    def _run(self, path: Path) -> list[dict[str, np.ndarray]]:
        sess = self._session(path)
        names = [o.name for o in sess.get_outputs()]
        return [dict(zip(names, sess.run(names, f))) for f in self.feeds]

    def __call__(self, path: Path) -> dict[str, float]:
        """Output name to max |candidate - reference| (inf when non-finite)."""
        out: dict[str, float] = {}
        for ref, got in zip(self.reference, self._run(path)):
            for name, r in ref.items():
                g = np.asarray(got[name], np.float64)
                e = float(np.abs(g - r).max()) if np.isfinite(g).all() else float("inf")
                out[name] = max(out.get(name, 0.0), e)
        return out


def sensitivity_search(q, meter: ErrorMeter, work: Path, target: float,
                        tolerance: float) -> tuple[Path, dict[str, float], list[str], dict[str, float]]:
    """Which candidate layers go INT8: a per-layer sensitivity ranking, then a bisection.

    1. Candidates: the free layers, at most ``recipe.max_candidates`` of them, largest
       weights first (the rest stay float: small layers buy little speed).
    2. Sensitivity: each candidate quantised alone, its max abs output error measured
       on the first ``recipe.sensitivity_samples`` calibration samples (a ranking only).
    3. Selection: the candidates ordered least sensitive first (those alone over the
       target dropped); the longest prefix of that order whose error on all the
       selection samples is within ``target`` is found by bisection, which assumes the
       error grows with the prefix (it does as a rule; a non-monotone step only makes
       the result shorter than it could be, never over the target).
    4. When no prefix is within the target on all the selection samples (the few
       ranking samples missed an outlier), steps 2-3 run again with the ranking
       measured on all of them (another N quantisations).

    Args:
        q: the model's ``precision._Quantizer`` (pre-processed model, calibration cache,
            ``recipe``, ``free`` and ``ranked`` candidates, ``quantize(dst, float_nodes)``).
        meter: errors against FP32 on all the selection samples.
        work: folder for the trial files.
        target: max abs error allowed on the calibration samples.
        tolerance: the model's INT8 tolerance (for the error message).

    Returns:
        (chosen QDQ file, its errors per output, the INT8 layers, the sensitivity of each
        ranked candidate).

    Raises:
        EngineBuildError: even the least sensitive layer alone misses the target.
    """
    r = q.recipe
    cands = q.ranked(r.max_candidates)
    quick = meter.subset(r.sensitivity_samples)
    sens = _sensitivity(q, quick, cands, work)
    lo, best, order = _longest_prefix(q, meter, work, target, cands, sens)
    if best is None and quick.samples < meter.samples:
        # the few samples missed an outlier (a layer fine on them but not on all): rank on all of them
        logger.info("INT8 %s: no prefix within the target with the %d-sample ranking; ranking on all %d",
                    q.src.name, quick.samples, meter.samples)
        sens = _sensitivity(q, meter, cands, work)
        lo, best, order = _longest_prefix(q, meter, work, target, cands, sens)
    if best is None:
        worst = min(sens.values(), default=float("inf"))
        raise EngineBuildError(
            f"INT8 quantisation of {q.src.name}: even the least sensitive layer alone gives a max "
            f"abs error of {worst:.3g} on the calibration samples, over the target "
            f"{target:.3g} ({r.margin:g} x tolerance {tolerance:g}); use FP16 or FP32")
    kept = order[:lo]
    logger.info("INT8 %s: %d of %d layers quantised (%d ranked); max abs error %.3g on the calibration "
                "samples", q.src.name, len(kept), len(q.free), len(cands), max(best[1].values(), default=0.0))
    return best[0], best[1], kept, sens


def _sensitivity(q, meter: ErrorMeter, cands: list[str], work: Path) -> dict[str, float]:
    """Max abs output error of each candidate layer quantised alone (the others float)."""
    sens = {}
    for node in cands:
        path = q.quantize(work / "only.onnx", [n for n in q.free if n != node])
        sens[node] = max(meter(path).values(), default=0.0)
    return sens


def _longest_prefix(q, meter: ErrorMeter, work: Path, target: float, cands: list[str],
                    sens: dict[str, float]) -> tuple[int, tuple[Path, dict[str, float]] | None, list[str]]:
    """Bisection for the longest least-sensitive-first prefix within ``target`` on ``meter``.

    Returns:
        (prefix length, (its QDQ file, its errors) or None when no prefix is within the target,
        the order searched).
    """
    order = [n for n in sorted(cands, key=lambda n: (sens[n], cands.index(n))) if sens[n] <= target]
    lo, hi, best = 0, len(order), None  # lo: longest prefix known within the target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        path = q.quantize(work / f"prefix{mid}.onnx", [n for n in q.free if n not in order[:mid]])
        err = meter(path)
        if max(err.values(), default=0.0) <= target:
            lo, best = mid, (path, err)
        else:
            hi = mid - 1
    return lo, best, order
