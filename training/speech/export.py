"""Export the trained speech2face model: ONNX, model card JSON, validation and calibration sets.

Usage::

    python -m training.speech.export --data ~/.cache/avatar_app/speech_data --out models

Writes ``speech2face.onnx`` (opset 17, input ``features`` [B, T, 64], output
``blendshapes`` [B, T, 52], B and T dynamic), ``speech2face.card.json``
(dynamic dims B 1..16, T 10..300; tolerances; precisions; figures),
``speech2face.val.npz`` (held-out family windows) and ``speech2face.calib.npz``
(training windows) - each < 5 MB - and checks ONNX Runtime against PyTorch.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import torch

from training.speech.model import ExportWrapper, Speech2Face

log = logging.getLogger("export")
WINDOW = 100  # frames per validation/calibration sample (1 s)


def windows(d: dict, n: int, seed: int) -> np.ndarray:
    """(n, WINDOW, 64) float32 windows of a split (random, seeded)."""
    rng = np.random.default_rng(seed)
    f = d["features"]
    starts = rng.integers(0, len(f) - WINDOW, n)
    return np.stack([f[s:s + WINDOW] for s in starts]).astype(np.float32)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache/avatar_app/speech_data")
    ap.add_argument("--out", type=Path, default=Path("models"))
    ap.add_argument("--testdata", type=Path, default=None,
                    help="also store the real-speech figures (evaluate_real.py) in the card")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ck = torch.load(a.data / "model.pt", weights_only=True)
    model = Speech2Face(ch=ck["channels"])
    model.load_state_dict(ck["state"])
    model.eval()
    wrap = ExportWrapper(model).eval()
    onnx_path = a.out / "speech2face.onnx"
    x = torch.zeros(2, 100, 64)
    torch.onnx.export(wrap, (x,), str(onnx_path), input_names=["features"], output_names=["blendshapes"],
                      dynamic_axes={"features": {0: "B", 1: "T"}, "blendshapes": {0: "B", 1: "T"}},
                      opset_version=17, dynamo=False)
    import onnx

    m = onnx.load(str(onnx_path))
    metrics = json.loads((a.data / "metrics.json").read_text())
    meta = {"avatar_app.dynamic_dims": json.dumps({"B": [1, 1, 16], "T": [10, 80, 300]}),
            "avatar_app.precisions": json.dumps(["fp32", "fp16"]),
            "avatar_app.tolerances": json.dumps({"fp32": 1e-4, "fp16": 1e-2, "int8": 5e-2}),
            "avatar_app.receptive_field": str(model.receptive_field),
            "avatar_app.lookahead_ms": "20",
            "avatar_app.features": "log-mel 64 bands, 16 kHz, 25 ms Hann window, 10 ms hop "
                                   "(avatar_app.speech.mel.log_mel)"}
    for k, v in meta.items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    onnx.save(m, str(onnx_path))
    from training.speech.train import load

    held, train = load(a.data / "heldout.npz"), load(a.data / "train.npz")
    val, calib = windows(held, 64, 1), windows(train, 96, 2)
    np.savez_compressed(a.out / "speech2face.val.npz", features=val)
    np.savez_compressed(a.out / "speech2face.calib.npz", features=calib)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model(torch.from_numpy(val)).numpy()
    got = sess.run(None, {"features": val})[0]
    err = float(np.abs(ref - got).max())
    log.info("ONNX Runtime vs PyTorch max abs error %.2e", err)
    card = {"name": "speech2face", "version": 1,
            "inputs": {"features": "float32 [B, T, 64] log-mel (avatar_app.speech.mel.log_mel)"},
            "outputs": {"blendshapes": "float32 [B, T, 52] ARKit weights in [0, 1]"},
            "dynamic_dims": {"B": [1, 1, 16], "T": [10, 80, 300]},
            "tolerances": {"fp32": 1e-4, "fp16": 1e-2, "int8": 5e-2},
            "precisions": ["fp32", "fp16"],
            "precision_notes": "INT8 (ONNX Runtime static QDQ, percentile calibration on the calib set) "
                               "fails verification on the validation set (max abs error above the "
                               "0.05 tolerance though the mean is ~2e-3), so it is not offered; "
                               "see speech2face.md",
            "receptive_field_frames": model.receptive_field, "lookahead_ms": 20,
            "ort_vs_torch_max_abs": err, "metrics": metrics, "licence": "GPL-3.0-or-later"}
    if a.testdata is not None:
        from avatar_app.inference import EngineManager
        from avatar_app.speech.engine_animator import EngineSpeechAnimator
        from avatar_app.speech.loudness import LoudnessSpeechAnimator
        from training.speech.evaluate_real import evaluate

        eng = EngineSpeechAnimator(onnx_path, manager=EngineManager(isolate=False))
        real = evaluate(a.testdata, {"engine": eng, "loudness": LoudnessSpeechAnimator()})
        card["real_speech"] = json.loads(json.dumps(real).replace("NaN", "null"))
        eng.close()
    (a.out / "speech2face.card.json").write_text(json.dumps(card, indent=1))
    for f in ("speech2face.onnx", "speech2face.val.npz", "speech2face.calib.npz"):
        log.info("%s: %.2f MB", f, (a.out / f).stat().st_size / 1e6)


if __name__ == "__main__":
    main()
