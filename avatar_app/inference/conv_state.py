"""Conv-state (streaming) graphs derived in memory from a causal convolution ONNX model.

A causal temporal convolution network (speech2face: Bai, Kolter, Koltun 2018) pads each
dilated convolution's input on the left by ``(k - 1) * d`` frames, so a call over T frames
recomputes the whole receptive field for every output. The *conv-state* form of the same
weights replaces each such ``Pad`` by a ``Concat`` with that block's last ``(k - 1) * d``
input frames, fed in as an extra input and returned (the newest ones) as an extra output:
a stream then feeds only its new frames per call and carries the states between calls
(the "conv-state" streaming of causal convolutions, e.g. WaveNet's fast generation, Paine et
al. 2016). With zero states a call equals the padded graph's call over the same frames.

The shipped ONNX file stays the engine contract (builds, calibration, verification run on it);
:func:`derive_conv_state` turns an open ONNX Runtime CPU runner of it into a
:class:`ConvStateEngine`, checked numerically against that runner before it is handed out.
TensorRT and the GPU providers keep the window call (their per-call floor, not the frames,
sets their cost; benchmarks/speech_state.py measures the CPU case).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from avatar_app.core.errors import AvatarError, BackendUnavailableError, ModelLoadError
from avatar_app.inference.base import DEFAULT_TOLERANCES, BaseRunner, Precision

logger = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConvState:
    """One causal convolution's state: the last ``frames`` input frames of its ``channels`` channels.

    Attributes:
        input: graph input name (float32 ``[B, channels, frames]``).
        output: graph output name holding the state after the call (same shape).
        channels: the convolution's input channels.
        frames: ``(kernel - 1) * dilation``: the left padding the state replaces.
    """

    input: str
    output: str
    channels: int
    frames: int


def _attr(node, name: str, default):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def conv_state_graph(model) -> tuple[object, tuple[ConvState, ...]]:
    """The conv-state form of a causal convolution graph (each causal ``Pad`` -> ``Concat`` with state).

    Every ``Pad`` node must feed exactly one ``Conv`` (rank-3 input ``[B, C, T]``, stride 1,
    no padding of its own, a static weight ``[C_out, C_in, k]``); its ``(k - 1) * d`` frames
    of left padding become the state. The pad amounts themselves are computed in the graph
    (not static), so whether the derived graph equals the source is checked numerically
    (:func:`derive_conv_state`), not here. Nodes only the pads used are dropped.

    Args:
        model: an ``onnx.ModelProto`` (not modified) or the path of an ONNX file.

    Returns:
        (the derived ``onnx.ModelProto``, its :class:`ConvState` s in graph order). The derived
        graph's first output is the source's first output; state inputs/outputs come after the
        source's own.

    Raises:
        ModelLoadError: the file cannot be read, or the graph has no causal Pad -> Conv pair or
            one that does not fit the pattern above.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if isinstance(model, (str, Path)):
        try:
            model = onnx.load(str(model))
        except Exception as exc:  # onnx raises DecodeError/OSError types of its own
            raise ModelLoadError(f"cannot read ONNX model {model}: {exc}") from exc
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    consumers: dict[str, list] = {}
    for n in g.node:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    batch = g.input[0].type.tensor_type.shape.dim[0]
    batch_dim = batch.dim_param or (batch.dim_value if batch.dim_value > 0 else "B")
    nodes, states = [], []
    for n in g.node:
        if n.op_type != "Pad":
            nodes.append(n)
            continue
        users = consumers.get(n.output[0], [])
        conv = users[0] if len(users) == 1 else None
        if conv is None or conv.op_type != "Conv" or conv.input[0] != n.output[0]:
            raise ModelLoadError(f"Pad node {n.name or n.output[0]!r} does not feed exactly one Conv")
        mode = _attr(n, "mode", b"constant")
        if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
            raise ModelLoadError(f"Pad node {n.name!r} is not a constant pad")
        if conv.input[1] not in inits:
            raise ModelLoadError(f"Conv {conv.name!r} has no static weight")
        w = numpy_helper.to_array(inits[conv.input[1]])
        if w.ndim != 3:
            raise ModelLoadError(f"Conv {conv.name!r} is not a 1-D convolution (weight {w.shape})")
        if any(_attr(conv, "pads", [0])) or any(s != 1 for s in _attr(conv, "strides", [1])):
            raise ModelLoadError(f"Conv {conv.name!r} pads or strides itself")
        dil = int(_attr(conv, "dilations", [1])[0])
        groups = int(_attr(conv, "group", 1))
        frames, ch = (w.shape[2] - 1) * dil, w.shape[1] * groups
        if frames < 1:
            raise ModelLoadError(f"Pad node {n.name!r} feeds a kernel-1 Conv: nothing to carry")
        key = f"{len(states)}_{conv.input[1]}".replace(".", "_").replace("/", "_")
        s_in, s_out = f"state_in_{key}", f"state_out_{key}"
        g.input.append(helper.make_tensor_value_info(s_in, TensorProto.FLOAT, [batch_dim, ch, frames]))
        g.output.append(helper.make_tensor_value_info(s_out, TensorProto.FLOAT, [batch_dim, ch, frames]))
        nodes.append(helper.make_node("Concat", [s_in, n.input[0]], [n.output[0]], axis=2,
                                      name=f"state_concat_{key}"))
        consts = []
        for suffix, val in (("start", -frames), ("end", _INT64_MAX), ("axis", 2)):
            consts.append(f"state_{key}_{suffix}")
            g.initializer.append(numpy_helper.from_array(np.array([val], np.int64), consts[-1]))
        nodes.append(helper.make_node("Slice", [n.output[0], *consts], [s_out], name=f"state_slice_{key}"))
        states.append(ConvState(s_in, s_out, int(ch), int(frames)))
    if not states:
        raise ModelLoadError("the graph has no causal Pad -> Conv: no conv state to derive")
    # drop what only the pads used (their pad-amount subgraphs), walking back from the outputs
    needed = {o.name for o in g.output}
    kept = []
    for n in reversed(nodes):
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(i for i in n.input if i)
    del g.node[:]
    g.node.extend(reversed(kept))
    used_inits = [i for i in g.initializer if i.name in needed]
    del g.initializer[:]
    g.initializer.extend(used_inits)
    return m, tuple(states)


class ConvStateEngine:
    """A conv-state (streaming) ONNX Runtime CPU session of one model, with its state layout.

    The caller owns the state (one per stream): :meth:`zero_state` starts a stream, each
    :meth:`step` takes the new frames and the state and returns the outputs of those frames
    and the next state.

    Attributes:
        source: the runner the graph was derived from (its ``describe()`` names the engine).
        states: the :class:`ConvState` s.
        receptive_field: ``1 + sum(frames)``: the frames one output sees.
        feature_input / output: the source graph's (first) input and output names.
        max_abs_diff: the largest difference against ``source`` in the derivation check.

    Thread: ``step`` from one thread at a time.
    """

    def __init__(self, session, source: BaseRunner, states: tuple[ConvState, ...]):
        self._session = session
        self.source = source
        self.states = states
        self.receptive_field = 1 + sum(s.frames for s in states)
        self.feature_input = session.get_inputs()[0].name
        self.output = session.get_outputs()[0].name
        self._out_names = [self.output] + [s.output for s in states]
        self._zero = {s.input: np.zeros((1, s.channels, s.frames), np.float32) for s in states}
        self.max_abs_diff = 0.0

    def zero_state(self) -> dict[str, np.ndarray]:
        """The state of a stream with nothing before it (what the padded graph assumes), batch 1.

        The arrays are shared and never written: :meth:`step` returns new ones.
        """
        return self._zero

    def step(self, features: np.ndarray, state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """Run the new frames of one stream.

        Args:
            features: (1, n, F) float32 (n >= 1): the frames after those the state holds.
            state: from :meth:`zero_state` or the previous ``step``.

        Returns:
            (the source output of those frames (1, n, ...) float32, the state after them).

        Raises:
            AvatarError: ONNX Runtime failed (wrong shapes included).
        """
        try:
            outs = self._session.run(self._out_names, {self.feature_input: features, **state})
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument types
            raise AvatarError(f"the conv-state engine of {self.source.name} failed: {exc}") from exc
        return outs[0], {s.input: v for s, v in zip(self.states, outs[1:])}

    def describe(self) -> str:
        """``speech2face.onnx on ort_cpu (fp32) [CPUExecutionProvider], conv-state``."""
        return f"{self.source.describe()}, conv-state"

    def close(self) -> None:
        """Release the session (the source runner is not touched)."""
        self._session = None


def derive_conv_state(runner: BaseRunner, *, check_hops: tuple[int, ...] = (4, 1, 10, 3),
                      seed: int = 0) -> ConvStateEngine:
    """The conv-state engine of an open ONNX Runtime CPU runner, checked against it.

    The graph comes from the file the runner loaded (:func:`conv_state_graph`), in a session
    with the runner's thread settings. Check: over seeded random features, a zero-state call
    over one receptive field, then calls of ``check_hops`` new frames each, must give the
    runner's newest output over each receptive field within the FP32 tolerance
    (``DEFAULT_TOLERANCES[FP32]``, 1e-4).

    Args:
        runner: an open FP32 :class:`~avatar_app.inference.ort.OrtRunner` on ``ort_cpu`` whose
            first input is ``[B, T, F]`` (FP16 / INT8 files keep their own graphs: their casts and
            Q/DQ nodes sit between the pads and the convolutions).
        check_hops: new frames per check call.
        seed: the check features' seed.

    Returns:
        An open :class:`ConvStateEngine` (``max_abs_diff`` set).

    Raises:
        BackendUnavailableError: the runner is not an ONNX Runtime CPU FP32 runner of a file.
        ModelLoadError: the graph does not fit (:func:`conv_state_graph`), the session does not
            load, or the check fails.
    """
    from avatar_app.inference.ort import OrtRunner, SessionFromOnnx

    path = runner.model_path if isinstance(runner, OrtRunner) else None
    if runner.backend != "ort_cpu" or path is None or runner.precision is not Precision.FP32:
        raise BackendUnavailableError(f"conv-state streaming is derived on ONNX Runtime CPU FP32 only, "
                                      f"not for {runner.describe()}")
    model, states = conv_state_graph(path)
    loader = SessionFromOnnx(path, "ort_cpu", threads=getattr(runner._loader, "threads", None),
                             model_bytes=model.SerializeToString())
    engine = ConvStateEngine(loader(), runner, states)
    spec = runner.input_specs[0]
    n_feat = spec.shape[2] if len(spec.shape) == 3 and spec.shape[2] else None
    if n_feat is None:
        raise ModelLoadError(f"{runner.name}: input {spec.name!r} is not [B, T, F] with a static F")
    r = engine.receptive_field
    rng = np.random.default_rng(seed)
    feats = rng.normal(-6.0, 4.0, (1, r + sum(check_hops), n_feat)).astype(np.float32)
    ends = [r]
    for h in check_hops:
        ends.append(ends[-1] + h)
    diff, state, start = 0.0, engine.zero_state(), 0
    for end in ends:
        out, state = engine.step(feats[:, start:end], state)
        ref = runner.infer({spec.name: feats[:, end - r:end]})[engine.output][0, -1]
        diff = max(diff, float(np.abs(out[0, -1] - ref).max()))
        start = end
    tol = DEFAULT_TOLERANCES[Precision.FP32]
    if not diff <= tol:
        raise ModelLoadError(f"the conv-state graph of {runner.name} differs from it by {diff:.3g} "
                             f"(> {tol:g}): the pads are not the causal (k - 1) * d frames")
    engine.max_abs_diff = diff
    logger.info("conv-state engine of %s: %d states, receptive field %d, check diff %.2g",
                runner.name, len(states), r, diff)
    return engine
