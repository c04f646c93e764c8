"""Convert MediaPipe's face detection, face mesh and iris models (TFLite) to ONNX for the engine layer.

Usage (in a venv with the converters, kept apart from the app's venv because
tensorflow-cpu pins its own numpy/protobuf)::

    python -m venv /work/venvs/lmk
    /work/venvs/lmk/bin/pip install tensorflow-cpu tf2onnx onnxsim onnxruntime onnx
    /work/venvs/lmk/bin/python training/landmarks/convert.py \
        --mediapipe .venv/lib/python3.11/site-packages/mediapipe --out models

The three .tflite files ship inside the mediapipe wheel (``mediapipe/modules/``,
Apache-2.0). Each is converted by tf2onnx (``from_tflite``, NCHW input) and then
edited so the engine layer can batch and verify it:

- one input ``image``: ``[B, 3, S, S]`` float32 RGB in 0..255 (NCHW, dynamic batch);
  the model's own normalisation (``[-1, 1]`` for the detector, ``[0, 1]`` for the
  mesh and the iris model, as MediaPipe's ImageToTensor/TfLiteConverter options set
  it) is the first node of the graph;
- outputs in [0, 1]-scaled units (coordinates divided by the input size S, scores
  through a sigmoid), so the engine layer's default tolerances (absolute errors
  of outputs in [0, 1]) mean the same thing as for the other engines;
- simplified with onnxsim, IR version 8 / opset 17 (what the app's onnx/onnxruntime read).

Every converted model is checked against the TFLite interpreter on random
images and on the real crops of ``make_sets.py`` when they exist (max abs error
printed and written into the card); the script fails when it exceeds 1e-4.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("convert")

OPSET = 17
IR_VERSION = 8
#: Largest |ONNX - TFLite| accepted on the check images (outputs in [0, 1] units).
MAX_CONVERSION_ERROR = 1e-4


@dataclass(frozen=True)
class Spec:
    """One model: where its .tflite lives in the wheel and how to wrap it.

    Attributes:
        name: the ONNX file stem in models/.
        tflite: path inside the mediapipe package.
        size: input side S in pixels (square input).
        scale / offset: the model's input normalisation, ``x * scale + offset`` of 0..255 pixels.
        outputs: TFLite output name -> (new name, shape after the batch axis, divisor, sigmoid);
            empty for the attention mesh, whose outputs :func:`assemble_478` builds.
        custom_ops: the model uses MediaPipe's custom operators (no TFLite interpreter
            check: TensorFlow's interpreter lacks them; make_sets.py checks it against
            MediaPipe's own graph instead).
    """

    name: str
    tflite: str
    size: int
    scale: float
    offset: float
    outputs: dict
    custom_ops: bool = False


SPECS = (
    Spec("face_detection", "modules/face_detection/face_detection_short_range.tflite", 128, 1 / 127.5, -1.0,
         {"regressors": ("regressors", (896, 16), 128.0, False),
          "classificators": ("scores", (896,), None, True)}),
    Spec("face_landmark", "modules/face_landmark/face_landmark_with_attention.tflite", 192, 1 / 255.0, 0.0,
         {}, custom_ops=True),
)

#: Raw outputs of face_landmark_with_attention.tflite: name -> landmarks, values per landmark.
ATTENTION_OUTPUTS = {"output_mesh_identity": (468, 3), "output_lips": (80, 2), "output_left_eye": (71, 2),
                     "output_right_eye": (71, 2), "output_left_iris": (5, 2), "output_right_iris": (5, 2)}
FACE_FLAG = "conv_faceflag"


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tf2onnx_convert(tflite: Path):
    """The raw tf2onnx conversion (NCHW input, batch 1), as an onnx ModelProto.

    MediaPipe's custom operators stay as ``TFL_*`` nodes (tf2onnx reports them as
    unsupported); :func:`mediapipe_ops.replace_custom_ops` replaces them.
    """
    import tf2onnx
    from tflite.Model import Model

    m = Model.GetRootAsModel(tflite.read_bytes(), 0)
    g = m.Subgraphs(0)
    in_name = g.Tensors(g.Inputs(0)).Name().decode()
    model, _ = tf2onnx.convert.from_tflite(str(tflite), opset=OPSET, inputs_as_nchw=[in_name])
    return model


def _interpreter(tflite: Path):
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(tflite))
    interp.allocate_tensors()
    return interp


def _keep_batch(model) -> None:
    """Make a batch-1 graph batch-generic: Reshapes to a leading 1 and Slices ending at 1 on axis 0."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    static = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    static.update({o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in g.output})
    inits = {i.name: i for i in g.initializer}
    for node in g.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            shape = numpy_helper.to_array(inits[node.input[1]])
            out_shape = static.get(node.output[0])
            if shape.size and shape[0] in (1, -1) and out_shape and out_shape[0] == 1 and all(out_shape):
                # the target becomes [-1, *the batch-1 output shape without its batch axis]
                name = f"{node.output[0]}__batch_target"  # initializers may be shared by reshapes
                g.initializer.append(numpy_helper.from_array(np.array([-1, *out_shape[1:]], np.int64), name))
                node.input[1] = name
        elif node.op_type == "Slice" and len(node.input) >= 4 and all(i in inits for i in node.input[1:4]):
            starts, ends, axes = (numpy_helper.to_array(inits[i]) for i in node.input[1:4])
            if 0 in axes.tolist():
                k = axes.tolist().index(0)
                if starts[k] == 0 and ends[k] == 1:
                    ends = ends.copy()
                    ends[k] = np.iinfo(np.int64).max
                    name = f"{node.output[0]}__batch_ends"
                    g.initializer.append(numpy_helper.from_array(ends.astype(np.int64), name))
                    node.input[2] = name


def _simple_outputs(g, spec: Spec) -> tuple[list, list]:
    """Reshape, scale and sigmoid nodes for the outputs of ``spec.outputs``."""
    from onnx import TensorProto, helper, numpy_helper

    post, new_outputs = [], []
    for out in g.output:
        if out.name not in spec.outputs:
            raise RuntimeError(f"{spec.name}: unexpected output {out.name!r} (want {sorted(spec.outputs)})")
        new, shape, divisor, sigmoid = spec.outputs[out.name]
        raw = _rename_raw(g, out.name)
        shape_name = f"{new}_shape"
        g.initializer.append(numpy_helper.from_array(np.array((-1, *shape), np.int64), shape_name))
        cur = f"{new}_reshaped"
        post.append(helper.make_node("Reshape", [raw, shape_name], [cur], name=f"{new}_reshape"))
        if divisor is not None:
            g.initializer.append(numpy_helper.from_array(np.array(1.0 / divisor, np.float32), f"{new}_scale"))
            post.append(helper.make_node("Mul", [cur, f"{new}_scale"], [new], name=f"{new}_to_unit"))
        if sigmoid:
            post.append(helper.make_node("Sigmoid", [cur], [new], name=f"{new}_sigmoid"))
        new_outputs.append(helper.make_tensor_value_info(new, TensorProto.FLOAT, ["B", *shape]))
    return post, new_outputs


def _rename_raw(g, name: str) -> str:
    """Rename a graph output's tensor to ``<name>__raw`` (the new output may take its name)."""
    raw = f"{name}__raw"
    for node in g.node:
        node.output[:] = [raw if o == name else o for o in node.output]
        node.input[:] = [raw if i == name else i for i in node.input]
    return raw


def assemble_478(g, spec: Spec, subsets: dict[str, list[int]]) -> tuple[list, list]:
    """The attention mesh's outputs refined into ``landmarks`` ``[B, 478, 3]`` and ``face_flag`` ``[B, 1]``.

    MediaPipe's LandmarksRefinementCalculator in the graph (order matters: later
    ones win): the 468-point mesh (x, y, z); lips, left eye, right eye replace
    x, y of their subsets and keep the mesh's z; the two irises become points
    468-472 and 473-477 with z = the mean mesh z of their eye's contour (the
    first 16 points of the eye subset). Coordinates are divided by the input
    size (as TensorsToLandmarks does); the face flag goes through a sigmoid
    (TensorsToFloats, activation SIGMOID).
    """
    from onnx import TensorProto, helper, numpy_helper

    nodes, names = [], {}
    for raw in (*ATTENTION_OUTPUTS, FACE_FLAG):
        names[raw] = _rename_raw(g, raw)

    def const(value, name, dtype=np.int64):
        g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    n_mesh = ATTENTION_OUTPUTS["output_mesh_identity"][0]
    mesh = node("Reshape", [names["output_mesh_identity"], const([-1, n_mesh, 3], "r478_mesh_shape")], "r478_mesh")
    mesh_z = node("Slice", [mesh, const([2], "r478_z0"), const([3], "r478_z1"), const([2], "r478_zax")],
                  "r478_mesh_z")
    parts, index_map, rows = [mesh], list(range(n_mesh)), n_mesh
    sources = (("output_lips", subsets["lips"]), ("output_left_eye", subsets["left_eye"]),
               ("output_right_eye", subsets["right_eye"]),
               ("output_left_iris", [n_mesh + i for i in range(5)]),
               ("output_right_iris", [n_mesh + 5 + i for i in range(5)]))
    contour = {"output_left_iris": subsets["left_eye"][:16], "output_right_iris": subsets["right_eye"][:16]}
    index_map += [0] * 10
    for raw, targets in sources:
        n = ATTENTION_OUTPUTS[raw][0]
        xy = node("Reshape", [names[raw], const([-1, n, 2], f"r478_{raw}_shape")], f"r478_{raw}_xy")
        if raw in contour:  # iris depth: mean z of the eye contour, one value per sample
            zc = node("Gather", [mesh_z, const(contour[raw], f"r478_{raw}_contour")], f"r478_{raw}_zc", axis=1)
            zm = node("ReduceMean", [zc], f"r478_{raw}_zm", axes=[1], keepdims=1)
            z = node("Add", [zm, const(np.zeros((1, n, 1)), f"r478_{raw}_zeros", np.float32)], f"r478_{raw}_z")
        else:
            z = node("Gather", [mesh_z, const(targets, f"r478_{raw}_idx")], f"r478_{raw}_z", axis=1)
        parts.append(node("Concat", [xy, z], f"r478_{raw}_xyz", axis=2))
        for k, t in enumerate(targets):
            index_map[t] = rows + k
        rows += n
    stacked = node("Concat", parts, "r478_sources", axis=1)
    picked = node("Gather", [stacked, const(index_map, "r478_index_map")], "r478_picked", axis=1)
    node("Mul", [picked, const(1.0 / spec.size, "r478_unit", np.float32)], "landmarks")
    flag = node("Reshape", [names[FACE_FLAG], const([-1, 1], "r478_flag_shape")], "r478_flag")
    node("Sigmoid", [flag], "face_flag")
    outs = [helper.make_tensor_value_info("landmarks", TensorProto.FLOAT, ["B", n_mesh + 10, 3]),
            helper.make_tensor_value_info("face_flag", TensorProto.FLOAT, ["B", 1])]
    return nodes, outs


def wrap(model, spec: Spec):
    """Custom operators replaced, dynamic batch, in-graph normalisation, unit outputs, simplified, IR 8.

    Raises:
        RuntimeError: the graph does not look like the expected conversion.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from training.landmarks import mediapipe_ops

    g = model.graph
    if len(g.input) != 1:
        raise RuntimeError(f"{spec.name}: expected one input, got {[i.name for i in g.input]}")
    subsets = None
    if spec.custom_ops:
        subsets = mediapipe_ops.refinement_indices(model)
        n = mediapipe_ops.replace_custom_ops(model)
        log.info("%s: %d MediaPipe custom operators rebuilt from ONNX operators", spec.name, n)
    _keep_batch(model)
    raw_in = g.input[0].name
    pre = [
        helper.make_node("Mul", ["image", "pre_scale"], ["image_scaled"], name="normalise_scale"),
        helper.make_node("Add", ["image_scaled", "pre_offset"], [raw_in], name="normalise_offset"),
    ]
    g.initializer.extend([numpy_helper.from_array(np.array(spec.scale, np.float32), "pre_scale"),
                          numpy_helper.from_array(np.array(spec.offset, np.float32), "pre_offset")])
    post, new_outputs = assemble_478(g, spec, subsets) if spec.custom_ops else _simple_outputs(g, spec)
    nodes = pre + list(g.node) + post
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    g.input.append(helper.make_tensor_value_info("image", TensorProto.FLOAT, ["B", 3, spec.size, spec.size]))
    del g.output[:]
    g.output.extend(new_outputs)
    del g.value_info[:]
    model.ir_version = IR_VERSION
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", OPSET))
    onnx.checker.check_model(model)
    import onnxsim

    simplified, ok = onnxsim.simplify(model, check_n=2)
    if not ok:
        raise RuntimeError(f"{spec.name}: onnxsim could not validate the simplified model")
    simplified.ir_version = IR_VERSION
    _canonical_names(simplified)
    onnx.checker.check_model(simplified)
    return simplified


def _canonical_names(model) -> None:
    """Name initializers, tensors and nodes by position (``w0``, ``t0``, ``Conv_12``) and drop onnxsim's
    metadata, so a conversion gives the same bytes every time (tf2onnx's names vary from run to run)."""
    g = model.graph
    keep = {i.name for i in g.input} | {o.name for o in g.output}
    inits = {i.name for i in g.initializer}
    names: dict[str, str] = {}
    for node in g.node:
        for t in list(node.input) + list(node.output):
            if t and t not in keep and t not in names:
                names[t] = f"w{sum(v.startswith('w') for v in names.values())}" if t in inits else \
                    f"t{sum(v.startswith('t') for v in names.values())}"
    for k, node in enumerate(g.node):  # tf2onnx keeps an arbitrary name of nodes it merges
        node.input[:] = [names.get(t, t) for t in node.input]
        node.output[:] = [names.get(t, t) for t in node.output]
        node.name = f"{node.op_type}_{k}"
    for init in g.initializer:
        init.name = names.get(init.name, init.name)
    ordered = sorted(g.initializer, key=lambda i: (len(i.name), i.name))
    copies = [type(i)() for i in ordered]
    for c, i in zip(copies, ordered):
        c.CopyFrom(i)
    del g.initializer[:]
    g.initializer.extend(copies)
    for vi in g.value_info:
        vi.name = names.get(vi.name, vi.name)
    props = [p for p in model.metadata_props if not p.key.startswith("onnxsim.")]
    del model.metadata_props[:]
    model.metadata_props.extend(props)


def check(model_bytes: bytes, tflite: Path, spec: Spec, images: np.ndarray) -> dict[str, float]:
    """Max |ONNX - TFLite| per output on ``images`` ((N, S, S, 3) uint8 RGB), in output units.

    Also checks that a batch gives the same outputs as the images one by one (the
    only check for a model with custom operators, which the TFLite interpreter cannot run).
    """
    import onnxruntime as ort

    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    nchw = np.ascontiguousarray(images.transpose(0, 3, 1, 2).astype(np.float32))
    batch = dict(zip(names, sess.run(None, {"image": nchw})))
    err = {n: 0.0 for n in names}
    interp = None if spec.custom_ops else _interpreter(tflite)
    for i, img in enumerate(images):
        single = dict(zip(names, sess.run(None, {"image": nchw[i:i + 1]})))
        for n in names:
            err[n] = max(err[n], float(np.abs(batch[n][i] - single[n][0]).max()))
        if interp is None:
            continue
        inp = interp.get_input_details()[0]
        outs = {d["name"]: d["index"] for d in interp.get_output_details()}
        interp.set_tensor(inp["index"], (img.astype(np.float32) * spec.scale + spec.offset)[None])
        interp.invoke()
        for raw, (new, shape, divisor, sigmoid) in spec.outputs.items():
            ref = interp.get_tensor(outs[raw]).reshape(shape).astype(np.float64)
            if divisor is not None:
                ref = ref / divisor
            if sigmoid:
                ref = 1.0 / (1.0 + np.exp(-ref))
            err[new] = max(err[new], float(np.abs(single[new][0] - ref).max()))
    return err


def check_images(spec: Spec, sets_dir: Path | None, rng: np.random.Generator) -> np.ndarray:
    """Random images plus the real crops of make_sets.py (when present), (N, S, S, 3) uint8."""
    imgs = [rng.integers(0, 256, (4, spec.size, spec.size, 3), dtype=np.uint8)]
    if sets_dir is not None:
        f = sets_dir / f"{spec.name}.val.npz"
        if f.is_file():
            with np.load(f) as z:
                imgs.append(np.ascontiguousarray(z["image"][:16].transpose(0, 2, 3, 1)).astype(np.uint8))
    return np.concatenate(imgs)


def main(argv: list[str] | None = None) -> int:
    """Convert the models; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mediapipe", type=Path, required=True, help="the installed mediapipe package folder")
    ap.add_argument("--out", type=Path, default=Path("models"), help="where the .onnx files go (default models/)")
    ap.add_argument("--sets", type=Path, default=None,
                    help="folder with the real-crop sets of make_sets.py, to check the conversion on them too")
    ap.add_argument("--only", choices=[s.name for s in SPECS], action="append", default=[])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import onnx

    rng = np.random.default_rng(0)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {}
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        tflite = args.mediapipe / spec.tflite
        if not tflite.is_file():
            log.error("%s not found (is --mediapipe the mediapipe package folder?)", tflite)
            return 1
        model = wrap(tf2onnx_convert(tflite), spec)
        meta = {"avatar_app.source": f"mediapipe/{spec.tflite}", "avatar_app.source_sha256": sha256(tflite),
                "avatar_app.licence": "Apache-2.0 (MediaPipe, Google LLC)",
                "avatar_app.converter": "tf2onnx + onnxsim (training/landmarks/convert.py)"}
        for k, v in meta.items():
            model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
        data = model.SerializeToString()
        err = check(data, tflite, spec, check_images(spec, args.sets, rng))
        worst = max(err.values())
        log.info("%s: max |onnx - tflite| %s", spec.name, {k: f"{v:.2e}" for k, v in err.items()})
        if worst > MAX_CONVERSION_ERROR:
            log.error("%s: conversion error %.3g exceeds %.0e", spec.name, worst, MAX_CONVERSION_ERROR)
            return 1
        dst = args.out / f"{spec.name}.onnx"
        dst.write_bytes(data)
        report[spec.name] = {"source": meta["avatar_app.source"], "source_sha256": meta["avatar_app.source_sha256"],
                             "onnx_sha256": sha256(dst), "bytes": dst.stat().st_size,
                             "max_abs_error_vs_tflite": err,
                             "nodes": {op: sum(1 for n in model.graph.node if n.op_type == op)
                                       for op in sorted({n.op_type for n in model.graph.node})}}
        log.info("wrote %s (%.2f MB, %d nodes)", dst, dst.stat().st_size / 1e6, len(model.graph.node))
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "conversion.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
