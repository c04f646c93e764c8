"""Write the face_recon model card (``.card.json`` + ``.md``) from the training and evaluation figures.

Usage (repository root, after train.py and evaluate.py)::

    python -m training.face_recon.card --model models/face_recon.onnx \
        --metrics models/face_recon.metrics.json --eval models/face_recon.eval.json

The JSON card is what the engine layer reads beside the model (dynamic
dimensions, supported precisions) plus every figure; the Markdown is for
people. Both are rewritten from the JSON inputs, so the figures in them are
always the measured ones.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.reconstruction import normalise as N
from training.face_recon.evaluate import SMILE_MARGIN
from training.face_recon.data import NOT_ESTIMATED  # torch-free (model.py needs PyTorch)


#: A shape whose output stays below this on every validation sample is listed as never output.
NEVER_OUTPUT_BELOW = 0.05


def never_output(model: Path, val: Path, below: float = NEVER_OUTPUT_BELOW) -> list[str]:
    """Estimated shapes the model never outputs: max over the validation set below ``below``.

    The validation set (``<stem>.val.npz``: half held-out synthetic, half held-out render and
    track, 1024 samples) has each shape active (> 0.1) in a few per cent of its samples, so a
    shape that stays below 0.05 on all of them is one the network has learned to answer 0 to
    whatever it sees (a sigmoid saturated during training; train.py ``--bce``).

    Args:
        model: the ONNX file.
        val: its validation set (``landmarks``, ``neutral``: (N, 478, 3) float32 metres).
        below: threshold on the blendshape output.

    Returns:
        ARKit names, in ARKit order, excluding the declared ``not_estimated`` shapes.
    """
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    with np.load(val) as z:
        lm, ne = z["landmarks"].astype(np.float32), z["neutral"].astype(np.float32)
    top = np.zeros(len(BLENDSHAPE_NAMES), np.float32)
    for i in range(0, len(lm), 16):
        out = sess.run(["blendshapes"], {"landmarks": lm[i:i + 16], "neutral": ne[i:i + 16]})[0]
        top = np.maximum(top, out.max(0))
    return [n for n, v in zip(BLENDSHAPE_NAMES, top) if v < below and n not in NOT_ESTIMATED]


def int8_layers(model: Path) -> dict | None:
    """Build the INT8 engine (ONNX Runtime CPU, a throw-away cache) and say which layers it quantised.

    The engine layer's mixed-precision search decides the split (see
    :func:`avatar_app.inference.precision.quantize_int8_mixed`); the card reads the
    card beside ``model`` for its tolerance and search margin.

    Returns:
        :func:`avatar_app.inference.precision.int8_summary` of the built file, or None
        when the build was not kept.
    """
    import tempfile

    from avatar_app.inference import EngineCache, EngineManager
    from avatar_app.inference.precision import int8_summary

    with tempfile.TemporaryDirectory(prefix="avatar_card_") as tmp:
        mgr = EngineManager(cache=EngineCache(Path(tmp)), isolate=False)
        entry = mgr.build(model, "ort_cpu", "int8")
        return int8_summary(entry.artifact_path) if entry.manifest.status == "ok" else None


def learning_curve(ablation: dict, curve: str = "render_track_only") -> dict | None:
    """Fit the held-out render-and-track error against the number of training frames.

    Fits ``y = a + b * (N / 1000) ** -c`` (the saturating power law of learning
    curves; Hestness et al. 2017, "Deep learning scaling is predictable,
    empirically") by least squares over ``c`` in [0.05, 3] (a grid; ``a`` and
    ``b`` linear for each ``c``), separately for the blendshape MAE and the median
    rotation error (degrees). ``a`` is the error that more frames of the same
    renders approach.

    Args:
        ablation: variant -> figures; the variants with ``"curve": curve`` and
            ``rt_frames`` are used.
        curve: which learning curve.

    Returns:
        ``{"frames": [...], "mae": [...], "rotation_deg": [...],
        "mae_asymptote", "rotation_asymptote_deg", "mae_at_1M",
        "rotation_at_1M_deg"}``, or None with fewer than four points.
    """
    pts = sorted((v["rt_frames"], v["rt"], v["rt_rot"]) for v in ablation.values()
                 if v.get("curve") == curve and "rt_frames" in v)
    if len(pts) < 4:
        return None
    n, mae, rot = (np.array(c, np.float64) for c in zip(*pts))

    def fit(y: np.ndarray) -> tuple[float, float, float]:
        best = None
        for c in np.linspace(0.05, 3.0, 296):
            A = np.stack([np.ones_like(n), (n / 1000.0) ** -c], 1)
            coef, *_ = np.linalg.lstsq(A, y, rcond=None)
            sse = float(((A @ coef - y) ** 2).sum())
            if best is None or sse < best[0]:
                best = (sse, float(coef[0]), float(coef[1]), float(c))
        return best[1:]

    out = {"frames": n.astype(int).tolist(), "mae": mae.tolist(), "rotation_deg": rot.tolist()}
    for key, y in (("mae", mae), ("rotation", rot)):
        a, b, c = fit(y)
        unit = "" if key == "mae" else "_deg"
        out[f"{key}_asymptote{unit}"] = round(a, 4)
        out[f"{key}_at_1M{unit}"] = round(a + b * 1000.0 ** -c, 4)
    return out


def build_card(metrics: dict, evaluation: dict | None, extra: dict | None = None) -> dict:
    """The JSON card: engine metadata, normalisation, data, and figures."""
    rig = load_face_model()
    card = {
        "name": "face_recon",
        "task": "MediaPipe face-mesh landmarks (aligned, relative to the user's neutral) -> 52 ARKit "
                "blendshapes, head-pose refinement, identity coefficients",
        "licence": "GPL-3.0-or-later (trained by this project on its own face model; no third-party weights)",
        "inputs": {
            "landmarks": "[B, 478, 3] float32 metres: head-frame points of the frame minus the user's neutral",
            "neutral": "[B, 478, 3] float32 metres: head-frame points of the user's neutral minus the rig template",
        },
        "outputs": {
            "blendshapes": "[B, 52] float32 in [0, 1], ARKit order; tongueOut always 0 (not estimated)",
            "rotation_6d": "[B, 6] rotation of the face in the aligned frame (columns 1 and 2); "
                           "head rotation = R0 @ from_6d(rotation_6d)",
            "translation": "[B, 3] float32 metres: correction added to the alignment's translation",
            "identity": f"[B, {rig.num_identity}] face-model identity coefficients ({', '.join(rig.identity_names)})",
        },
        "dynamic_dims": {"B": [1, 1, 16]},
        "precisions": ["fp32", "fp16", "int8"],
        # INT8 search target: a quarter of the tolerance (default half): eyeBlink is thresholded
        # at 0.5 downstream, and at half the tolerance one frame of the test clips changed side
        "int8_margin": 0.25,
        "normalisation_version": N.NORMALISATION_VERSION,
        "landmark_subset": list(N.SUBSET),
        "blendshape_names": list(BLENDSHAPE_NAMES),
        "not_estimated": list(NOT_ESTIMATED),
        "identity": {"k": rig.num_identity, "names": list(rig.identity_names)},
        "constant_predictor": metrics["constant_predictor"],
        "training": {k: metrics[k] for k in ("train_seconds", "threads", "seed", "epochs", "hidden", "use_z",
                                             "dropout", "weight_decay", "noise", "bce", "bce_rt",
                                             "trunk_reads_neutral", "small_share",
                                             "training_samples", "synthetic_samples",
                                             "render_track_samples", "render_track_sets", "rt_repeat")
                     if k in metrics},
        "heldout": {k: metrics[k] for k in ("heldout_synthetic", "heldout_render_track")},
    }
    if evaluation:
        card["evaluation"] = evaluation
    if extra:
        card.update(extra)
    return card


def _row(name: str, syn: dict, rt: dict, rtt: dict | None, ict: dict | None, note: str = "") -> str:
    def f(d, k):
        v = d.get(k) if d else None
        return "-" if v is None else f"{v:.3f}"

    s, r = syn["per_shape"][name], rt["per_shape"][name]
    trip = rtt.get(name) if rtt else None
    ic = ict.get(name) if ict else None
    return (f"| {name}{note} | {f(s, 'mae')} | {f(s, 'mae_active')} | {f(r, 'mae')} | {f(r, 'mae_active')} | "
            f"{f(trip, 'w1')} | {f(trip, 'w05')} | {f(trip, 'others_max')} | "
            f"{f(ic, 'w1')} | {f(ic, 'w05')} | {f(ic, 'others_max')} | {f(ic, 'solver_w1')} |")


def bars_table(card: dict) -> list[str]:
    """Issue 5's bars with the measured value and whether it is met."""
    syn, rt = card["heldout"]["heldout_synthetic"], card["heldout"]["heldout_render_track"]
    ev = card.get("evaluation") or {}
    rows = [
        ("held-out synthetic MAE <= 0.03 and <= half the constant's",
         f"{syn['mae']:.4f} (constant {syn['const_mae']:.4f})", syn["mae"] <= 0.03 and syn["ratio"] <= 0.5),
        ("held-out synthetic rotation <= 1.5 deg median", f"{syn['rotation_err_deg_median']:.2f} deg",
         syn["rotation_err_deg_median"] <= 1.5),
        ("held-out render-and-track MAE <= 0.03 and <= half the constant's",
         f"{rt['mae']:.4f} (constant {rt['const_mae']:.4f})", rt["mae"] <= 0.03 and rt["ratio"] <= 0.5),
        ("held-out render-and-track rotation <= 1.5 deg median", f"{rt['rotation_err_deg_median']:.2f} deg",
         rt["rotation_err_deg_median"] <= 1.5),
    ]
    real = ev.get("real")
    if real:
        e, s_ = real["blinks"]["engine"]["overall"], real["blinks"]["solver"]["overall"]
        margin = lambda d: min(d["min_closed_weight"] - 0.5, 0.5 - d["max_far_weight"])  # noqa: E731
        better = (e["precision"], e["recall"]) > (s_["precision"], s_["recall"]) or (
            (e["precision"], e["recall"]) == (s_["precision"], s_["recall"]) and margin(e) > margin(s_))
        rows.append(("blinks: precision and recall >= 0.9", f"{e['precision']:.3f} / {e['recall']:.3f}",
                     e["precision"] >= 0.9 and e["recall"] >= 0.9))
        rows.append(("blinks better than the solver (higher precision/recall, or equal and a wider margin: "
                     "the smaller of weakest closed-frame eyeBlink - 0.5 and 0.5 - highest open-frame eyeBlink)",
                     f"solver {s_['precision']:.3f} / {s_['recall']:.3f}; "
                     f"margin {margin(e):.3f} vs {margin(s_):.3f}",
                     better and e["precision"] >= s_["precision"] and e["recall"] >= s_["recall"]))
        j = real["jaw"]
        rows.append(("GRID jawOpen-words correlation better than the solver",
                     ", ".join(f"{v['corr_with_words']:.2f} vs {j['solver'][k]['corr_with_words']:.2f}"
                               for k, v in j["engine"].items()),
                     all(v["corr_with_words"] > j["solver"][k]["corr_with_words"] for k, v in j["engine"].items())))
        sm = real["smile"]["engine"]
        rows.append(("London: mouthSmile L/R higher on the smiling photo",
                     f"{sm['neutral'][0]:.2f}/{sm['neutral'][1]:.2f} -> {sm['smiling'][0]:.2f}/{sm['smiling'][1]:.2f}",
                     sm["smiling"][0] > sm["neutral"][0] + SMILE_MARGIN
                     and sm["smiling"][1] > sm["neutral"][1] + SMILE_MARGIN))
    if "stability" in ev:
        st = ev["stability"]
        rows.append(("stability: raw output sd <= 0.01 (200 JPEG re-encodes, <= 1 px shifts)",
                     f"{st['max_sd']:.4f} ({st['worst_shape']})", st["max_sd"] <= 0.01))
    split = card.get("int8_layers")
    for prec, r in (ev.get("precisions") or {}).items():
        mixed = (f"; mixed precision: {split['quantized_layers']} of "
                 f"{split['quantized_layers'] + split['float_layers']} weighted layers in INT8"
                 if prec == "int8" and split else "")
        rows.append((f"{prec.upper()} within 0.05 of FP32 (engine-layer verification), same blink events",
                     f"{r['status']}: max {r['max_abs_error']:.4f}, blendshapes {r['blendshapes_max_abs']:.4f}; "
                     f"same blinks {r.get('same_blink_frames')}{mixed}",
                     r["status"] == "ok" and bool(r.get("same_blink_frames"))))
    out = ["## Bars of issue 5", "", "| bar | measured | met |", "|---|---|---|"]
    out += [f"| {a} | {b} | {'yes' if c else '**no**'} |" for a, b, c in rows]
    return out + [""]




def _curve_sentence(lc: dict | None) -> str:
    """One sentence on the render-and-track learning curve (sweep 9), or "" without one."""
    if not lc:
        return ""
    return (f"Nor in the amount of data: trained on render-and-track frames alone, the held-out error "
            f"falls from {lc['mae'][0]:.4f} ({lc['frames'][0]} frames) to {lc['mae'][-1]:.4f} "
            f"({lc['frames'][-1]}), rotation from {lc['rotation_deg'][0]:.2f}° to "
            f"{lc['rotation_deg'][-1]:.2f}°; a power-law fit a + b·N^-c approaches MAE "
            f"{lc['mae_asymptote']:.3f} and {lc['rotation_asymptote_deg']:.1f}° (at a million frames "
            f"{lc['mae_at_1M']:.3f} and {lc['rotation_at_1M_deg']:.1f}°), "
            + ("both above the bars (sweep 9). " if lc["mae_asymptote"] > 0.03 and lc["rotation_asymptote_deg"] > 1.5
               else "(sweep 9). "))


def limits_text(card: dict) -> str:
    """The model card's Limits section, from the measured figures."""
    rt = card["heldout"]["heldout_render_track"]
    ev = card.get("evaluation") or {}
    obs = ev.get("gaze_observability") or {}
    real = ev.get("real") or {}
    per = rt["per_shape"]
    eye = [n for n in per if n.startswith("eyeLook")]
    eye_share = sum(per[n]["mae"] for n in eye) / sum(v["mae"] for v in per.values())
    items = [
        f"- **Render and track stays at MAE {rt['mae']:.3f}** (bar 0.03) and rotation "
        f"{rt['rotation_err_deg_median']:.1f}° (bar 1.5°). A network trained long on the render-and-track "
        "frames alone fits them to 0.032 but stays at 0.051 on held-out frames (ablations above), "
        "so the limit is in what MediaPipe reports on the renders, not in the network's capacity. "
        + _curve_sentence(card.get("render_track_learning_curve"))
        + f"The eight gaze shapes alone hold {100 * eye_share:.0f} % of the error: ",
    ]
    if obs:
        s, r = obs["synthetic"], obs["render_track"]
        items[-1] += (f"the iris landmark's displacement correlates with the rendered gaze at r = "
                      f"{s['vertical']:.2f} (vertical) / {s['horizontal']:.2f} (horizontal) on projected points "
                      f"but r = {r['vertical']:.2f} / {r['horizontal']:.2f} after MediaPipe on the renders. "
                      "Rendering eyeballs whose iris the lids occlude (this version) raised that from the "
                      "first renderer's figures (table above) and lowered the error, but MediaPipe still "
                      "follows vertical gaze weakly: the rig's upper lid follows the gaze by under 1 mm "
                      "where a real lid follows it closely, and MediaPipe's iris model expects that. "
                      "Lids, brows and squint show the same loss more mildly.")
    if real:
        e, s_ = real["blinks"]["engine"]["overall"], real["blinks"]["solver"]["overall"]
        j = real["jaw"]
        items.append(
            f"- On real recordings it does not yet beat the frozen geometric solver everywhere: blinks "
            f"{e['precision']:.2f}/{e['recall']:.2f} precision/recall vs the solver's "
            f"{s_['precision']:.2f}/{s_['recall']:.2f}; jawOpen-words r "
            + ", ".join(f"{v['corr_with_words']:.2f} vs {j['solver'][k]['corr_with_words']:.2f}"
                        for k, v in j["engine"].items())
            + ". The app therefore keeps the solver as its default face path and the engine is a choice "
            "(`avatar-app render --face engine`, the studio's Engines panel)."
            + (f" The solver detects every one of the {s_['tp']} labelled closed frames with no false "
               "positive, so on these labels (../shared/testdata/video/blinks.json) being better than it "
               "can only mean the same precision and recall with a wider margin between closed and open "
               "frames (the criterion of the bars table); recordings with more labelled blinks would "
               "separate the two better."
               if s_["precision"] == 1.0 and s_["recall"] == 1.0 else ""))
    split = card.get("int8_layers")
    if split and split["float_layers"]:
        sens = split.get("sensitivity", {})
        worst = max(sens, key=sens.get) if sens else None
        items.append(
            f"- **INT8 is mostly float.** The engine layer's layer-wise search (target "
            f"{card.get('int8_margin', 0.5)} x the 0.05 tolerance) keeps {split['float_layers']} of "
            f"{split['quantized_layers'] + split['float_layers']} weighted layers in float "
            f"({', '.join(split['float_nodes'])}); only {', '.join(split['quantized_nodes']) or 'none'} "
            "is INT8"
            + (f". Quantised alone, {worst} already gives a worst error of {sens[worst]:.3f}" if worst else "")
            + ". So the INT8 engine is about as large and as fast as FP32 here; a smaller INT8 error "
            "would need quantisation-aware training.")
    items += [
        "- Metamorphic relations on the real stills (flip, in-plane rotation, rescaling) are checked by "
        "tests/reconstruction/test_face_recon_real.py; a relation this model does not meet is a strict xfail there, "
        "with its measured value. The flip relation fails on the London smiling photo: noseSneer reads "
        "0.01 on it and 0.37 on its mirror image, because MediaPipe places the nose wings differently "
        "on the two. Adding MediaPipe's own errors to the synthetic data fixes that but loses the "
        "smile (sweep 10, ablations above).",
        "- The automatic neutral needs a few seconds with open eyes and closed lips.",
        "- Translation: the camera's field of view is assumed (60°), so distance is known only up to it.",
        "- Trained on one rig (the project's face model); the ICT head is used for evaluation only.",
    ]
    return "\n".join(items)

def markdown(card: dict, ablation: dict | None = None) -> str:
    """The human-readable model card."""
    syn, rt = card["heldout"]["heldout_synthetic"], card["heldout"]["heldout_render_track"]
    tr = card["training"]
    ev = card.get("evaluation") or {}
    real = ev.get("real", {})
    lines = [
        "# face_recon — model card",
        "",
        "Landmarks to face parameters: MediaPipe's 478 face-mesh landmarks of one frame, aligned "
        "to the face model and taken relative to the user's neutral face, to the 52 ARKit "
        "blendshapes, a refinement of the head pose and the face-shape (identity) coefficients "
        "of the face model. Runtime: `avatar_app.reconstruction.engine.EngineReconstructor` "
        "through the engine layer (ONNX Runtime or TensorRT, FP32/FP16/INT8).",
        "",
        "## Inputs and outputs",
        "",
        "| tensor | shape | meaning |", "|---|---|---|",
    ]
    for kind in ("inputs", "outputs"):
        for k, v in card[kind].items():
            shape, text = v.split("] ", 1)
            lines.append(f"| `{k}` ({kind[:-1]}) | {shape}] | {text} |")
    lines += [
        "",
        "Batch B is dynamic, 1..16 (`dynamic_dims` in face_recon.card.json); opset 17.",
        "",
        "## Normalisation (defined once: `avatar_app/reconstruction/normalise.py`, version "
        f"{card['normalisation_version']})",
        "",
        "1. MediaPipe's normalised x, y and relative z to a right-handed pixel space;",
        "2. weighted similarity fit (Umeyama 1991) of the face model's stable landmarks "
        "(forehead, nose ridge, eye corners, cheekbones, nose wings) → image scale;",
        "3. pinhole un-projection (assumed 60° horizontal field of view) of each landmark at its own "
        "depth, fit again in metres → coarse pose R0, t0 and head-frame points;",
        "4. `landmarks` = head-frame points − the user's neutral (explicit calibration, or the "
        "running region-wise estimate of `auto_neutral.NeutralEstimator`); `neutral` = the "
        "neutral − the face model's template.",
        "",
        "The network reads MediaPipe's own 146-landmark blendshape subset (`kLandmarksSubsetIdxs`, "
        "face_blendshapes_graph.cc): lid and lip contours, irises, brows, nose ridge, face oval; the "
        "other points are interpolated between these by the face mesh. "
        + ("MediaPipe's z is used (ablation below)." if tr.get("use_z", True) else
           "MediaPipe's z is not used (ablation below)."),
        "",
        "## Network",
        "",
        "Inputs standardised by their training mean and sd and clipped to ±6 sd (Sub, Div, Min, Max: "
        "operators ONNX Runtime's INT8 quantiser keeps in float, so INT8 never sees metres). "
        "Mirror-symmetric MLP: trunk "
        + ("[expression 438, neutral 438]" if tr.get("trunk_reads_neutral", True) else
           f"[expression 438, identity {card['identity']['k']}] (the trunk sees the face "
           "shape only through the identity coefficients: reading the whole neutral let real faces, "
           "whose shape lies outside the rig's identity space, push it off its training range)")
        + f" → {' → '.join(str(h) for h in tr.get('hidden', []))} "
        "(ReLU6: bounded activations quantise finely) → blendshapes (sigmoid; tongueOut masked to 0), "
        "rotation 6D (Zhou et al. 2019, made orthonormal in the graph), translation; identity a linear "
        "map of the neutral alone (an Einsum on its own float path). The face and its mirror image "
        "run as one batch and the mirrored outputs are mapped back and averaged, so a flipped face "
        "gives exactly swapped Left/Right outputs for mirrored landmarks (MediaPipe's landmarks of a "
        "mirrored image are not exactly mirrored; see Limits). About 0.6 M multiply-adds per pass (twice, for "
        f"the mirror). Training: dropout {tr.get('dropout', 0)}, weight decay {tr.get('weight_decay', 0)}, "
        f"Gaussian noise {tr.get('noise', 0.05)} sd on the standardised inputs and hidden layers.",
        "",
        "## Training data (seeded; `training/face_recon/`)",
        "",
        f"- **Synthetic projected** ({tr.get('synthetic_samples')} samples, seed 11): the face model "
        "with random identity (15 morphs, N(0, 0.5) clipped ±1.5), expressions sampled as people "
        "combine them (`sampling.py`: sparse correlated groups, symmetric and asymmetric, blinks and "
        "winks, gaze, speech mouth shapes, emotions; "
        f"{int(round(100 * tr.get('small_share', 0)))} % of the faces scaled down by 0.1–0.6 to small "
        "expressions), head pose yaw ±60°, pitch ±40°, roll ±30°, "
        "webcam field of view 45–80°, 0.3–1.5 m, landmark noise; each with its own neutral "
        "observation.",
        f"- **Render and track** ({tr.get('render_track_samples')} frames of 2 x 1300 subjects, seed 1, "
        f"repeated ×{tr.get('rt_repeat')} per epoch): the face model rendered (moderngl/EGL, 640×480) "
        "with skin tones from light to dark, lip/brow/iris/lash colours, key light from random "
        "directions, flat or smooth shading, blur, sensor noise and JPEG, face 100–320 px wide, "
        "pose up to yaw 55°, pitch 35°, roll 30°, tracked by the app's MediaPipe face mesh; a "
        "near-frontal neutral frame per subject. Inputs thus carry MediaPipe's own errors. Two "
        "renderers (`render.py`): *eyeball* (`rt_train.npz`): the eye openings show a shaded "
        "eyeball whose iris turns with the rig's gaze and is occluded by the lids, and 60 % of the "
        "subjects wear the face model's source photo (public-domain NASA portrait, scikit-image) "
        "as skin, lip and brow texture, tinted to the skin tone; *discs* (`rt_train_discs.npz`, "
        "the first renderer): flat colours with iris and pupil discs drawn over the eyes.",
        "- Held out: synthetic seed 12 (5000), render-and-track seed 2 (150 other subjects, eyeball "
        "renderer; the discs renderer's seed-2 set is reported beside it).",
        "- The ICT FaceKit head (../shared/testdata/avatars, MIT) is used only for evaluation "
        "(round trip below), not for training.",
        "",
        f"Training: {tr.get('epochs')} epochs, AdamW one-cycle, loss L2 + 0.1·L1"
        + (f" + {tr['bce']}·binary cross-entropy (soft targets"
           + (f"; x {tr['bce_rt']} on render-and-track samples" if tr.get("bce_rt", 1.0) != 1.0 else "") + ")"
           if tr.get("bce") else "")
        + f" on 51 blendshapes + pose + identity terms; {tr.get('train_seconds', 0) / 60:.1f} min on this "
        f"2-core CPU ({tr.get('threads')} threads, shared machine).",
        "",
        "## Figures (held out)",
        "",
        "| set | blendshape MAE | constant predictor MAE | ratio | rotation error median (p90) | "
        "alignment alone | identity MAE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in (("synthetic", syn), ("render and track", rt)):
        lines.append(f"| {name} | {d['mae']:.4f} | {d['const_mae']:.4f} | {d['ratio']:.2f} | "
                     f"{d['rotation_err_deg_median']:.2f}° ({d['rotation_err_deg_p90']:.2f}°) | "
                     f"{d['alignment_only_rotation_err_deg_median']:.2f}° | {d['identity_mae']:.3f} |")
    sets = ev.get("render_track_sets") or {}
    if sets:
        lines += ["", "Render-and-track sets (evaluate.py --rt-set; the iris-gaze correlation is "
                  "`evaluate.gaze_observability`, MediaPipe's iris landmark vs the rendered gaze):", "",
                  "| set | frames | blendshape MAE | ratio to constant | rotation error median | "
                  "iris vs gaze r (vertical / horizontal) |", "|---|---|---|---|---|---|"]
        for label, d in sets.items():
            o = d.get("gaze_observability", {}).get("render_track", {})
            lines.append(f"| {label} | {d['frames']} | {d['mae']:.4f} | {d['ratio']:.2f} | "
                         f"{d['rotation_err_deg_median']:.2f}° | {o.get('vertical', float('nan')):.2f} / "
                         f"{o.get('horizontal', float('nan')):.2f} |")
    if ablation:
        lines += ["", "### Ablations (same data, same epochs unless stated)", "",
                  "RT train: MAE on render-and-track training frames (a network that fits them no better "
                  "than held-out frames is limited by the data, not by capacity). Real: blink "
                  "precision/recall, GRID s1/s2 jawOpen-words r, London smile L/R, stability sd (sweep 10: also the "
                  "flip relation's largest weight difference, bar 0.12), "
                  "from cached MediaPipe landmarks of ../shared/testdata.", "",
                  "| variant | synthetic MAE | render-and-track MAE | rotation | RT train MAE | real |",
                  "|---|---|---|---|---|---|"]
        for k, v in ablation.items():
            rl = v.get("real")
            real_s = (f"{rl['blinks_P']:.2f}/{rl['blinks_R']:.2f}; r {rl['jaw_r'][0]:.2f}/{rl['jaw_r'][1]:.2f}; "
                      f"smile {rl['smile_LR'][0]:.2f}/{rl['smile_LR'][1]:.2f}; sd {rl['stability_sd']:.3f}"
                      + (f"; flip London/GRID {rl['flip_london']:.2f}/{rl['flip_grid']:.2f}"
                         if "flip_london" in rl else "")
                      if rl else "")
            rtt = f"{v['rt_train']:.4f}" if "rt_train" in v else ""
            lines.append(f"| {k} | {v['syn']:.4f} | {v['rt']:.4f} | {v['rt_rot']:.2f}° | {rtt} | {real_s} |")
    lines += [
        "",
        "### Per blendshape",
        "",
        "MAE over all held-out samples and over samples where the shape is active (target > 0.1); "
        "round trip: each shape alone rendered at weight 1 and 0.5 on 4 held-out subjects (two at "
        "±20° yaw), tracked, reconstructed with the subject's neutral render as calibration "
        "(mean output, and the largest other output at weight 1). ICT: the same on the ICT "
        "FaceKit head (a second, artist-made rig; USC ICT, MIT licence; used for evaluation only, "
        "never for training, never shipped), rendered frontally by the app's renderer; last "
        "column: the geometric solver on the same renders.",
        "",
        "| shape | syn MAE | syn MAE active | R&T MAE | R&T MAE active | rig trip w=1 | w=0.5 | "
        "largest other | ICT w=1 | ICT w=0.5 | ICT largest other | ICT solver w=1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rtt = ev.get("round_trip")
    ict = ev.get("ict_round_trip")
    never = card.get("never_output", [])
    for n in BLENDSHAPE_NAMES:
        if n in card["not_estimated"]:
            lines.append(f"| {n} | not estimated | | | | | | | | | | |")
        else:
            lines.append(_row(n, syn, rt, rtt, ict, " (never output)" if n in never else ""))
    lines += ["", "Not estimated: tongueOut (no landmark sees the tongue; output fixed at 0). "
              "Weakly observable (see the table): jawForward and cheekPuff move mostly in depth, "
              "mouthClose only shows with an open jaw."]
    if never:
        lines += ["", f"**Never output by this model**: {', '.join(never)} (below {NEVER_OUTPUT_BELOW} on every "
                  "validation sample, `card.never_output`): their sigmoids saturated at 0 during training, "
                  "where the L2 loss's gradient vanishes (train.py `--bce`)."]
    elif "never_output" in card:
        lines += ["", f"Every estimated shape responds: none stays below {NEVER_OUTPUT_BELOW} on all validation "
                  "samples (`card.never_output`). A previous model, trained with the L2 + L1 loss alone, "
                  "never output 23 of them: a rare shape's sigmoid saturated at 0 early in training, where "
                  "the L2 gradient vanishes; the cross-entropy term's gradient on the logit (p - y) does "
                  "not (sweep 8 above)."]
    lines.append("")
    if real:
        b = real["blinks"]
        lines += ["## Real recordings (../shared/testdata; engine vs the frozen geometric solver)", "",
                  "| figure | engine | geometric solver |", "|---|---|---|"]
        for key, label in (("precision", "blink precision (frame level, 3 GRID clips)"),
                           ("recall", "blink recall"),
                           ("min_closed_weight", "weakest closed-frame eyeBlink (min of both eyes)"),
                           ("max_far_weight", "highest eyeBlink > 3 frames from any blink")):
            lines.append(f"| {label} | {b['engine']['overall'][key]:.3f} | {b['solver']['overall'][key]:.3f} |")
        for vid in ("grid_s1_bbaf2n", "grid_s2_swwp2s"):
            e, s = real["jaw"]["engine"][vid], real["jaw"]["solver"][vid]
            lines.append(f"| {vid} jawOpen in words / silence (r) | {e['mean_in_words']:.3f} / "
                         f"{e['mean_in_silence']:.3f} ({e['corr_with_words']:.2f}) | "
                         f"{s['mean_in_words']:.3f} / {s['mean_in_silence']:.3f} ({s['corr_with_words']:.2f}) |")
        sm = real["smile"]
        lines.append(f"| London 005 mouthSmile L/R neutral → smiling | {sm['engine']['neutral'][0]:.2f}/"
                     f"{sm['engine']['neutral'][1]:.2f} → {sm['engine']['smiling'][0]:.2f}/"
                     f"{sm['engine']['smiling'][1]:.2f} | "
                     f"{sm['solver']['neutral'][0]:.2f}/{sm['solver']['neutral'][1]:.2f} → "
                     f"{sm['solver']['smiling'][0]:.2f}/{sm['solver']['smiling'][1]:.2f} |")
        lines.append("")
    if "gaze" in ev:
        g = ev["gaze"]
        lines += [f"Gaze (held-out render and track, eyes open, {g['samples']} frames): median error "
                  f"{g['engine_median_deg']:.1f}° from the engine's eyeLook weights, "
                  f"{g['iris_median_deg']:.1f}° from the iris geometry (looking straight ahead: "
                  f"{g['zero_median_deg']:.1f}°); the runtime uses "
                  f"{'the engine' if g['engine_median_deg'] <= g['iris_median_deg'] else 'the irises'}.", ""]
    from avatar_app.evaluation.report import card_section

    lines += card_section(Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "fidelity.json")
    lines += bars_table(card)
    lines += [
        "## Limits",
        "",
        limits_text(card),
        "",
        "## Licence",
        "",
        "GPL-3.0-or-later, as the project. Trained only on data made by this project's own face model "
        "(which is built from a public-domain NASA portrait and MediaPipe's topology, Apache-2.0); "
        "the 146-landmark subset list is MediaPipe's (Apache-2.0).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("models/face_recon.onnx"))
    ap.add_argument("--metrics", type=Path, required=True)
    ap.add_argument("--eval", type=Path)
    ap.add_argument("--ablation", type=Path, help="JSON: variant -> {syn, rt, rt_rot}")
    ap.add_argument("--extra", type=Path, help="JSON merged into the card (e.g. precision checks)")
    args = ap.parse_args(argv)
    metrics = json.loads(args.metrics.read_text())
    evaluation = json.loads(args.eval.read_text()) if args.eval and args.eval.is_file() else None
    extra = json.loads(args.extra.read_text()) if args.extra and args.extra.is_file() else None
    card = build_card(metrics, evaluation, extra)
    val = args.model.with_name(args.model.stem + ".val.npz")
    if val.is_file():
        card["never_output"] = never_output(args.model, val)
    card["int8_layers"] = int8_layers(args.model)
    ablation = json.loads(args.ablation.read_text()) if args.ablation and args.ablation.is_file() else None
    if ablation and (lc := learning_curve(ablation)):
        card["render_track_learning_curve"] = lc
    args.model.with_name(args.model.stem + ".card.json").write_text(json.dumps(card, indent=1) + "\n")
    args.model.with_name(args.model.stem + ".md").write_text(markdown(card, ablation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
