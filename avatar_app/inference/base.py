"""The runner protocol every engine backend implements.

Shape of the API follows Polygraphy's loaders and runners: a runner is created
cheaply, ``open()`` makes it usable (or ``with runner:``), ``infer(feeds)``
checks the feeds against :attr:`BaseRunner.input_specs` and hands them to the
backend's ``_infer_impl``.
"""
from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from avatar_app.core.clock import now_ns
from avatar_app.core.errors import InputError, ModelLoadError

logger = logging.getLogger(__name__)


class Precision(str, enum.Enum):
    """Numeric precision of an engine. It lives in the ONNX file (DESIGN.md)."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"

    @classmethod
    def parse(cls, value: "str | Precision") -> "Precision":
        """``Precision`` from ``"fp32"``/``"FP16"``/``Precision.INT8``.

        Raises:
            InputError: for an unknown name.
        """
        if isinstance(value, Precision):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            names = ", ".join(p.value for p in cls)
            raise InputError(f"unknown precision {value!r}; choose one of {names}") from None


#: Default maximum absolute error against the FP32 ONNX Runtime reference, for
#: outputs in [0, 1] (issue 4 / DESIGN.md). A model's metadata may set stricter ones.
DEFAULT_TOLERANCES: dict[Precision, float] = {
    Precision.FP32: 1e-4,
    Precision.FP16: 1e-2,
    Precision.INT8: 5e-2,
}


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one engine input or output.

    Attributes:
        name: tensor name in the ONNX graph.
        dtype: numpy dtype of the array the caller passes or receives.
        shape: tuple of ints, with ``None`` for a dynamic dimension.
        dim_names: symbolic names of the dimensions (``"B"``, ``"T"``) or None each.
    """

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]
    dim_names: tuple[str | None, ...] = ()

    def check(self, array: np.ndarray) -> None:
        """Raise InputError if ``array`` does not fit this spec (dtype, rank, static dims)."""
        if not isinstance(array, np.ndarray):
            raise InputError(f"input {self.name!r} must be a numpy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            raise InputError(
                f"input {self.name!r} must have dtype {np.dtype(self.dtype).name}, got {array.dtype.name}")
        if array.ndim != len(self.shape):
            raise InputError(
                f"input {self.name!r} must have {len(self.shape)} dimensions {self.shape_str()}, "
                f"got shape {array.shape}")
        for axis, (want, got) in enumerate(zip(self.shape, array.shape)):
            if want is not None and want != got:
                raise InputError(
                    f"input {self.name!r} dimension {axis} must be {want} {self.shape_str()}, "
                    f"got shape {array.shape}")

    def shape_str(self) -> str:
        """The shape as text, dynamic dimensions by name: ``[B, 478, 3]``."""
        names = self.dim_names or (None,) * len(self.shape)
        parts = [str(s) if s is not None else (n or "?") for s, n in zip(self.shape, names)]
        return "[" + ", ".join(parts) + "]"


class BaseRunner:
    """Base of every engine runner (the ``Engine`` protocol of DESIGN.md).

    Subclasses implement ``_open_impl()`` (which must set ``_input_specs`` and
    ``_output_specs``), ``_infer_impl(feeds)`` and ``_close_impl()``.

    Attributes:
        backend: registry name of the backend (``"ort_cpu"``, ``"tensorrt_rtx"``...).
        precision: the engine's :class:`Precision`.
        name: a label for messages (usually the model file name).
        last_latency_ms: wall time of the latest ``infer`` call in milliseconds
            (``None`` before the first call).
        verification: the :class:`~avatar_app.inference.verify.VerificationResult` the
            engine passed before it was handed out, or None (reference engine).

    Thread: ``infer`` may be called from one thread at a time per runner.
    """

    backend: str = "base"

    def __init__(self, precision: Precision | str = Precision.FP32, name: str = ""):
        self.precision = Precision.parse(precision)
        self.name = name
        self.last_latency_ms: float | None = None
        self.verification = None
        self._input_specs: tuple[TensorSpec, ...] = ()
        self._output_specs: tuple[TensorSpec, ...] = ()
        self._is_open = False
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        """Whether ``open()`` succeeded and ``close()`` was not called yet."""
        return self._is_open

    def open(self) -> "BaseRunner":
        """Load the engine so that ``infer`` can be called. Idempotent.

        Returns:
            self.

        Raises:
            ModelLoadError, BackendUnavailableError: the engine cannot be loaded here.
        """
        if not self._is_open:
            self._open_impl()
            self._is_open = True
            logger.debug("opened %s (%s, %s)", self.name, self.backend, self.precision.value)
        return self

    def close(self) -> None:
        """Release the engine and its buffers. Idempotent."""
        if self._is_open:
            self._is_open = False
            self._close_impl()

    def __enter__(self) -> "BaseRunner":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- specs -------------------------------------------------------------------
    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        """Input :class:`TensorSpec` s in graph order (runner must be open)."""
        self._require_open()
        return self._input_specs

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        """Output :class:`TensorSpec` s in graph order (runner must be open)."""
        self._require_open()
        return self._output_specs

    # -- inference ---------------------------------------------------------------
    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the engine once.

        Args:
            feeds: one array per input name, matching :attr:`input_specs`
                (dtype exactly, static dimensions exactly).

        Returns:
            dict of output name to a new numpy array (never a reused buffer).

        Raises:
            ModelLoadError: the runner is not open.
            InputError: a feed is missing, unknown or does not match its spec.
        """
        self._require_open()
        self._check_feeds(feeds)
        with self._lock:
            t0 = now_ns()
            out = self._infer_impl(feeds)
            self.last_latency_ms = (now_ns() - t0) / 1e6
        return out

    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
        if not isinstance(feeds, Mapping):
            raise InputError(f"feeds must be a dict of input name to array, got {type(feeds).__name__}")
        names = {s.name for s in self._input_specs}
        unknown = set(feeds) - names
        missing = names - set(feeds)
        if unknown or missing:
            raise InputError(
                f"{self.name or 'engine'}: inputs must be exactly {sorted(names)}; "
                f"missing {sorted(missing)}, unknown {sorted(unknown)}")
        for spec in self._input_specs:
            spec.check(feeds[spec.name])
        _check_shared_dims(self._input_specs, feeds)

    def _require_open(self) -> None:
        if not self._is_open:
            raise ModelLoadError(
                f"engine {self.name or self.backend!r} is not open: call open() or use 'with'")

    # -- for subclasses ----------------------------------------------------------
    def _open_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _infer_impl(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def _close_impl(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        """One line for the UI/CLI: ``face_recon.onnx on ort_cpu (fp32)``."""
        return f"{self.name} on {self.backend} ({self.precision.value})"

    def __repr__(self) -> str:
        state = "open" if self._is_open else "closed"
        return f"<{type(self).__name__} {self.describe()} {state}>"


def _check_shared_dims(specs: Sequence[TensorSpec], feeds: Mapping[str, np.ndarray]) -> None:
    """Dynamic dimensions with the same symbolic name must agree across inputs."""
    seen: dict[str, tuple[str, int]] = {}
    for spec in specs:
        for axis, dim_name in enumerate(spec.dim_names):
            if dim_name is None or spec.shape[axis] is not None:
                continue
            size = feeds[spec.name].shape[axis]
            if dim_name in seen and seen[dim_name][1] != size:
                other, other_size = seen[dim_name]
                raise InputError(
                    f"dimension {dim_name!r} is {other_size} in input {other!r} "
                    f"but {size} in input {spec.name!r}")
            seen.setdefault(dim_name, (spec.name, size))
