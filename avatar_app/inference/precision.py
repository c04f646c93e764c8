"""Precision conversion: the precision lives in the ONNX file.

TensorRT 11 and TensorRT for RTX build strongly typed networks (no FP16/INT8
builder flags), so:

- FP16 is a float16 ONNX that keeps float32 inputs and outputs, made with
  onnxconverter-common's ``float16.convert_float_to_float16(keep_io_types=True)``.
- INT8 is a QDQ ONNX from ``onnxruntime.quantization.quantize_static`` with
  symmetric activations and weights (TensorRT requires zero points of 0),
  per-channel weights and entropy or percentile calibration.

ONNX Runtime runs all three files directly.
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from avatar_app.core.errors import BackendUnavailableError, EngineBuildError
from avatar_app.inference.base import Precision
from avatar_app.inference.modelinfo import iter_batches

logger = logging.getLogger(__name__)

#: Calibration methods accepted by :func:`quantize_int8`.
CALIBRATION_METHODS = ("entropy", "percentile", "minmax")


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


def quantize_int8(src: Path, dst: Path, reader: FeedSetReader, method: str = "percentile",
                  percentile: float = 99.999) -> Path:
    """Write a QDQ INT8 ONNX made by static quantisation of an FP32 model.

    Symmetric activations and weights (zero points 0, as TensorRT requires),
    per-channel weights, float biases, QDQ format; activations calibrated on ``reader``.

    Args:
        src: FP32 .onnx file.
        dst: output .onnx path.
        reader: calibration feeds (default set plus user samples).
        method: ``"entropy"``, ``"percentile"`` or ``"minmax"``.
        percentile: percentile for the ``"percentile"`` method.

    Returns:
        ``dst``.

    Raises:
        BackendUnavailableError: onnxruntime.quantization is not available.
        EngineBuildError: empty calibration set, no quantisable operator, or a
            quantisation failure.
    """
    try:
        from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise BackendUnavailableError(f"INT8 quantisation needs onnxruntime.quantization: {exc}") from exc
    import onnx

    if method not in CALIBRATION_METHODS:
        raise EngineBuildError(f"unknown calibration method {method!r}; use one of {CALIBRATION_METHODS}")
    if reader.num_samples == 0:
        raise EngineBuildError(f"INT8 calibration of {src.name} needs calibration samples; none found")
    cal = {"entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile,
           "minmax": CalibrationMethod.MinMax}[method]
    # QuantizeBias False: biases stay float. An int32 bias behind DequantizeLinear is
    # valid ONNX but TensorRT's parser rejects it (DQ input must be 8-bit or smaller).
    extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
    if method == "percentile":
        extra["CalibPercentile"] = percentile
    with tempfile.TemporaryDirectory(prefix="avatar_quant_") as tmp:
        pre = Path(tmp) / "pre.onnx"
        try:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        except Exception as exc:  # noqa: BLE001 - optional optimisation step; fall back to the source
            logger.warning("quantisation pre-processing of %s skipped: %s", src.name, exc)
            pre = src
        reader.rewind()
        try:
            chatter = io.StringIO()  # the calibrator prints progress to stdout
            with contextlib.redirect_stdout(chatter):
                quantize_static(str(pre), str(dst), reader, quant_format=QuantFormat.QDQ,
                                per_channel=True, activation_type=QuantType.QInt8,
                                weight_type=QuantType.QInt8, calibrate_method=cal, extra_options=extra)
            logger.debug("calibration of %s: %s", src.name, chatter.getvalue().strip())
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types from here
            raise EngineBuildError(f"INT8 quantisation of {src.name} failed: {exc}") from exc
    model = onnx.load(str(dst), load_external_data=False)
    nq = sum(n.op_type == "QuantizeLinear" for n in model.graph.node)
    if nq == 0:
        raise EngineBuildError(
            f"INT8 quantisation of {src.name} produced no quantised operator "
            f"(ops: {sorted({n.op_type for n in model.graph.node})}); use FP16 or FP32")
    bad = [i.name for i in model.graph.initializer
           if "zero_point" in i.name and np.any(onnx.numpy_helper.to_array(i) != 0)]
    if bad:
        raise EngineBuildError(f"INT8 quantisation of {src.name} left non-zero zero points: {bad[:3]}")
    return dst


def convert(src: Path, dst: Path, precision: Precision, reader: FeedSetReader | None = None,
            method: str = "percentile") -> Path:
    """Write the ONNX file of ``precision`` (FP32 is copied unchanged).

    Raises:
        EngineBuildError, BackendUnavailableError: see :func:`convert_fp16`, :func:`quantize_int8`.
    """
    precision = Precision.parse(precision)
    if precision is Precision.FP32:
        dst.write_bytes(Path(src).read_bytes())
        return dst
    if precision is Precision.FP16:
        return convert_fp16(src, dst)
    if reader is None:
        raise EngineBuildError("INT8 conversion needs a calibration data reader")
    return quantize_int8(src, dst, reader, method)
