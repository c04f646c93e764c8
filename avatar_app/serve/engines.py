"""The engines a server serves: opened through the engine layer, described for Triton and for clients.

Each served model is one :class:`ServedEngine`: the model's engine opened by
:class:`~avatar_app.inference.EngineManager` exactly as the app opens a local one
(the backend and precision chosen, else the fastest verified, falling back to ONNX
Runtime CPU FP32; every engine verified against the FP32 reference before use),
one runner per Triton model instance. A model whose first axis is dynamic in every
input and output is served with Triton's dynamic batcher up to the largest batch
of its optimisation profile.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from avatar_app.core.errors import AvatarError, InputError
from avatar_app.inference.base import BaseRunner, Precision, TensorSpec
from avatar_app.inference.manager import EngineManager, OpenResult
from avatar_app.inference.modelinfo import ModelInfo
from avatar_app.inference.remote import INFO_MODEL

logger = logging.getLogger(__name__)

#: Largest batch of a batchable model whose card gives no range for its batch axis.
DEFAULT_MAX_BATCH = 64


@dataclass(frozen=True)
class EngineChoice:
    """The backend and precision asked for one model (None: the engine layer's choice)."""

    backend: str | None = None
    precision: str | None = None


def parse_engine_choice(text: str) -> tuple[str, EngineChoice]:
    """``MODEL=BACKEND``, ``MODEL=BACKEND/PRECISION`` or ``MODEL=PRECISION`` -> (model, choice).

    Raises:
        InputError: malformed text or an unknown precision.
    """
    model, sep, value = str(text).partition("=")
    model, value = model.strip(), value.strip()
    if not sep or not model or not value:
        raise InputError(f"--engine {text!r}: write MODEL=BACKEND[/PRECISION], e.g. face_recon=ort_cpu/int8")
    backend, _, precision = value.partition("/")
    if not precision and backend.lower() in {p.value for p in Precision}:
        backend, precision = "", backend
    if precision:
        precision = Precision.parse(precision).value
    return model, EngineChoice(backend or None, precision or None)


def batch_limit(info: ModelInfo) -> int:
    """Triton's ``max_batch_size`` for a model: 0 when its first axis is not a shared dynamic batch axis.

    Returns:
        The profile's largest size of the batch axis (card ``dynamic_dims``), else
        :data:`DEFAULT_MAX_BATCH`; 0 when some input or output has a fixed first axis.
    """
    specs = list(info.inputs) + list(info.outputs)
    if not specs or any(not s.shape or s.shape[0] is not None for s in specs):
        return 0
    names = {s.dim_names[0] for s in info.inputs if s.dim_names and s.dim_names[0]}
    if len(names) > 1:
        return 0
    ranges = [info.dynamic_dims[n].max for n in names if n in info.dynamic_dims]
    ranges += [info.dynamic_dims[f"{s.name}:0"].max for s in info.inputs if f"{s.name}:0" in info.dynamic_dims]
    return min(ranges) if ranges else DEFAULT_MAX_BATCH


def triton_dims(spec: TensorSpec, batched: bool) -> tuple[int, ...]:
    """Triton's dims of a tensor: without the batch axis when batched, -1 for dynamic sizes."""
    shape = spec.shape[1:] if batched else spec.shape
    return tuple(-1 if s is None else int(s) for s in shape)


@dataclass
class ServedEngine:
    """One model on the server.

    Attributes:
        info: the model file's :class:`ModelInfo`.
        runners: one open engine per Triton model instance.
        result: the engine layer's :class:`OpenResult` of the first instance (attempts, reasons).
        max_batch_size: Triton's ``max_batch_size`` (0: no batching).
    """

    info: ModelInfo
    runners: list[BaseRunner]
    result: OpenResult
    max_batch_size: int
    asked: EngineChoice = field(default_factory=EngineChoice)

    @property
    def name(self) -> str:
        """The served model's name (the model file's stem)."""
        return self.info.name

    @property
    def runner(self) -> BaseRunner:
        """The first instance's engine."""
        return self.runners[0]

    def entry(self) -> dict:
        """This model's entry in the server's description (:data:`~avatar_app.inference.remote.INFO_MODEL`)."""
        r = self.runner
        v = r.verification
        return {"sha256": self.info.sha256, "backend": r.backend, "precision": r.precision.value,
                "engine": r.describe(), "max_batch_size": self.max_batch_size, "instances": len(self.runners),
                "verification": v.to_json() if v is not None else None,
                "attempts": [a.line() for a in self.result.attempts]}

    def infer_functions(self) -> list[Callable]:
        """pytriton inference callables, one per instance (requests batched by Triton, concatenated by pytriton)."""
        from pytriton.decorators import batch

        def make(runner: BaseRunner):
            specs = {s.name: s.dtype for s in runner.input_specs}

            @batch
            def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
                feeds = {k: np.ascontiguousarray(v, dtype=specs[k]) for k, v in inputs.items()}
                return runner.infer(feeds)

            return infer

        return [make(r) for r in self.runners]

    def close(self) -> None:
        """Close every instance's engine."""
        for r in self.runners:
            r.close()


def open_served_engines(model_paths: Iterable[Path], choices: Mapping[str, EngineChoice] | None = None,
                        default: EngineChoice | None = None, manager: EngineManager | None = None,
                        instances: int = 1) -> tuple[list[ServedEngine], dict[str, str]]:
    """Open the engine of every model, as the app does locally.

    Args:
        model_paths: FP32 ONNX files (``models/*.onnx``).
        choices: model name -> the backend/precision asked for it.
        default: the choice for models not in ``choices``.
        manager: the engine manager (default: a new one on the user's engine cache).
        instances: engines per model (Triton model instances), >= 1.

    Returns:
        (served engines, model name -> why it is not served).

    Raises:
        InputError: ``choices`` names a model that is not among ``model_paths``, or instances < 1.
    """
    if instances < 1:
        raise InputError(f"--instances must be at least 1, not {instances}")
    manager = manager or EngineManager()
    paths = sorted(Path(p) for p in model_paths)
    choices = dict(choices or {})
    unknown = set(choices) - {p.stem for p in paths}
    if unknown:
        raise InputError(f"--engine names unknown model(s) {', '.join(sorted(unknown))}; "
                         f"served models: {', '.join(p.stem for p in paths) or 'none'}")
    served, failed = [], {}
    for path in paths:
        ask = choices.get(path.stem, default or EngineChoice())
        runners: list[BaseRunner] = []
        try:
            info = manager.model_info(path)
            first = manager.open_engine(path, ask.backend, ask.precision)
            runners.append(first.runner)
            for _ in range(instances - 1):  # the same (cached) engine again
                runners.append(manager.open_engine(path, first.runner.backend, first.runner.precision).runner)
        except AvatarError as exc:
            for r in runners:
                r.close()
            failed[path.stem] = str(exc)
            logger.error("%s is not served: %s", path.stem, exc)
            continue
        served.append(ServedEngine(info, runners, first, batch_limit(info), ask))
    return served, failed


def manifest(engines: Iterable[ServedEngine], app_version: str) -> bytes:
    """The JSON the :data:`~avatar_app.inference.remote.INFO_MODEL` returns (UTF-8)."""
    doc = {"app_version": app_version, "models": {e.name: e.entry() for e in engines}}
    return json.dumps(doc, sort_keys=True).encode()


def bind_all(triton, engines: Iterable[ServedEngine], max_queue_delay_us: int, app_version: str) -> None:
    """Bind every served engine and the description model to a ``pytriton.triton.Triton``.

    Args:
        triton: the (not yet running) Triton object.
        engines: the served engines.
        max_queue_delay_us: the dynamic batcher's longest wait for more requests, microseconds.
        app_version: avatar-app's version, for the description.
    """
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

    engines = list(engines)
    for e in engines:
        batched = e.max_batch_size > 0
        ins = [Tensor(name=s.name, dtype=s.dtype.type, shape=triton_dims(s, batched)) for s in e.runner.input_specs]
        outs = [Tensor(name=s.name, dtype=s.dtype.type, shape=triton_dims(s, batched))
                for s in e.runner.output_specs]
        cfg = ModelConfig(batching=batched, max_batch_size=e.max_batch_size,
                          batcher=DynamicBatcher(max_queue_delay_microseconds=int(max_queue_delay_us)))
        triton.bind(model_name=e.name, infer_func=e.infer_functions(), inputs=ins, outputs=outs, config=cfg,
                    strict=True)
    doc = np.array([manifest(engines, app_version)], dtype=np.object_)

    def describe(requests):
        return [{"engines": doc} for _ in requests]

    triton.bind(model_name=INFO_MODEL, infer_func=describe,
                inputs=[Tensor(name="request", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="engines", dtype=bytes, shape=(1,))],
                config=ModelConfig(batching=False, max_batch_size=0))
