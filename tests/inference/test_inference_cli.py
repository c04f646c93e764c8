"""``avatar-app engines list|build|calibrate|clear`` through add_engines_parser/run_engines."""
from __future__ import annotations

import argparse
import io

import numpy as np
import pytest
from inference_helpers import HAS_TRT_RTX

from avatar_app.core.errors import InputError
from avatar_app.inference.cli import add_engines_parser, resolve_model, run_engines


def _run(*argv) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="avatar-app")
    add_engines_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()  # reports and the error line together (test_cli_hardening keeps them apart)
    return run_engines(parser.parse_args(list(argv)), out, out), out.getvalue()


def test_build_list_clear(tiny_models, user_dirs):
    model = str(tiny_models["matmul"])
    rc, text = _run("engines", "build", "--model", model, "--backend", "ort_cpu", "--precision", "fp16",
                    "--inline")
    assert rc == 0, text
    assert "100% done" in text and "fp16 passed" in text
    rc, text = _run("engines", "build", "--model", str(tiny_models["fp16_overflow"]), "--precision", "fp16",
                    "--inline")
    assert rc == 2 and "REJECTED" in text and "float16 maximum" in text
    rc, text = _run("engines", "list", "--model", model)
    assert rc == 0
    assert "ort_cpu" in text and "ready" in text and "fp16: supported" in text
    assert "ort_cuda" in text and "onnxruntime-gpu" in text  # why not, on this machine
    assert "matmul fp16 ort_cpu" in text and "verification: fp16 passed" in text
    assert "fp16_overflow fp16 ort_cpu" in text and "rejected" in text
    assert "would run on" in text and "ort_cpu/fp32: ok" in text
    rc, text = _run("engines", "clear")
    assert rc == 0 and "removed 2 cached engine(s)" in text


@pytest.mark.skipif(not HAS_TRT_RTX, reason="tensorrt_rtx is not installed")
def test_build_rtx_plan_in_child(tiny_models, user_dirs):
    rc, text = _run("engines", "build", "--model", str(tiny_models["conv"]), "--backend", "tensorrt_rtx",
                    "--precision", "int8")
    assert "engine.plan" in text and "TensorRT" in text  # progress from the builder
    assert rc in (0, 2)  # 2: built but unverified (no GPU here)


def test_calibrate_add_and_clear(tiny_models, user_dirs, tmp_path):
    samples = tmp_path / "rec.npz"
    np.savez(samples, x=np.random.default_rng(1).standard_normal((12, 32)).astype(np.float32))
    rc, text = _run("engines", "calibrate", "--model", str(tiny_models["matmul"]), "--add", str(samples))
    assert rc == 0 and "added 12 samples" in text and "12 samples of your own" in text
    assert "488 more" in text
    rc, text = _run("engines", "calibrate", "--model", str(tiny_models["matmul"]), "--clear")
    assert rc == 0 and "deleted 1 sample file(s)" in text
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros(3))
    rc, text = _run("engines", "calibrate", "--model", str(tiny_models["matmul"]), "--add", str(bad))
    assert rc == 1 and "no array for input 'x'" in text


def test_errors_are_messages(user_dirs):
    err = io.StringIO()
    parser = argparse.ArgumentParser(prog="avatar-app")
    add_engines_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["engines", "build", "--model", "no_such_model", "--inline"])
    assert run_engines(args, io.StringIO(), err) == 1
    text = err.getvalue()
    assert "model 'no_such_model' not found" in text
    assert "shipped models: face_detection, face_landmark, face_recon, speech2face" in text
    with pytest.raises(InputError):
        resolve_model("no_such_model")
    args = parser.parse_args(["engines", "build", "--model", __file__, "--backend", "nope", "--inline"])
    err = io.StringIO()
    assert run_engines(args, io.StringIO(), err) == 1 and "is not a readable ONNX file" in err.getvalue()


def test_list_tells_cache_entries_of_the_shipped_model_apart(user_dirs):
    """Each entry names the model file it was built from and whether that is the shipped one."""
    from avatar_app.inference.cli import _shipped_model_hashes

    rc, text = _run("engines", "build", "--model", "face_recon", "--precision", "fp32", "--inline")
    assert rc == 0, text
    rc, text = _run("engines", "list")
    sha = _shipped_model_hashes()["face_recon"]
    assert rc == 0 and "face_recon fp32 ort_cpu" in text and f"model {sha[:8]}, current model" in text


def test_clear_unused_removes_only_engines_of_other_files(tmp_path, user_dirs):
    """After a model update the old engines are unused: ``clear --unused`` removes them, keeps the rest."""
    import shutil

    import onnx

    from avatar_app.resources import resource_path

    old = tmp_path / "face_recon.onnx"  # another file under the shipped name (an "older model")
    shutil.copy(resource_path("models/face_recon.onnx"), old)
    shutil.copy(resource_path("models/face_recon.card.json"), tmp_path / "face_recon.card.json")
    m = onnx.load(str(old))
    onnx.helper.set_model_props(m, {**{p.key: p.value for p in m.metadata_props}, "note": "older"})
    onnx.save(m, str(old))
    for model in ("face_recon", str(old)):
        rc, text = _run("engines", "build", "--model", model, "--precision", "fp32", "--inline")
        assert rc == 0, text
    rc, text = _run("engines", "list")
    assert "current model" in text and "not the shipped file" in text, text
    rc, text = _run("engines", "clear", "--unused")
    assert rc == 0 and "removed 1 unused cached engine(s)" in text, text
    rc, text = _run("engines", "list")
    assert "current model" in text and "not the shipped file" not in text, text


def test_clear_unused_removes_engines_of_another_backend_version(user_dirs):
    """An engine built by an older onnxruntime/TensorRT is never looked up again: it is unused."""
    import json

    from avatar_app.inference.cache import EngineCache

    rc, text = _run("engines", "build", "--model", "face_recon", "--precision", "fp32", "--inline")
    assert rc == 0, text
    (folder, entry, _), = EngineCache().entries()
    manifest = folder / "manifest.json"
    data = json.loads(manifest.read_text())
    data["key"]["backend_version"] = "0.0.1"
    manifest.write_text(json.dumps(data))
    rc, text = _run("engines", "list")
    assert "built with ort_cpu 0.0.1" in text and "(unused by the app)" in text, text
    rc, text = _run("engines", "clear", "--unused")
    assert "removed 1 unused" in text, text


def test_list_shows_how_an_int8_entry_was_calibrated(tiny_models, user_dirs):
    for method in ("percentile", "minmax"):
        rc, text = _run("engines", "build", "--model", str(tiny_models["matmul"]), "--precision", "int8",
                        "--calibration-method", method, "--inline")
        assert rc in (0, 2), text
    rc, text = _run("engines", "list")
    assert "calibration: percentile method" in text and "calibration: minmax method" in text, text
    # no samples of the user's own were stored: only the model's set is named
    assert "of your own" not in text, text


def test_int8_build_says_how_many_layers_are_int8(user_dirs):
    """The mixed-precision split is printed (the real face_recon keeps its sensitive layers float)."""
    from avatar_app.inference.precision import int8_summary

    rc, text = _run("engines", "build", "--model", "face_recon", "--precision", "int8", "--inline")
    assert rc == 0, text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("int8 layers:"))
    path = next(ln for ln in text.splitlines() if ln.strip().startswith("engine:")).split()[1]
    split = int8_summary(path)
    assert not set(split["quantized_nodes"]) & set(split["float_nodes"])  # each layer counted once
    total = split["quantized_layers"] + split["float_layers"]
    assert f"{split['quantized_layers']} of {total} weighted layers in INT8" in line, line
    assert split["quantized_layers"] >= 1 and total == 5  # face_recon: five Gemm layers
    rc, text = _run("engines", "list")
    assert line.strip() in text, text


def test_a_folder_as_model_and_a_calibration_method_without_int8_are_said(user_dirs, tmp_path, tiny_models):
    with pytest.raises(InputError, match="is a folder"):
        resolve_model(str(tmp_path))
    parser = argparse.ArgumentParser(prog="avatar-app")
    add_engines_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["engines", "build", "--model", str(next(iter(tiny_models.values()))), "--backend",
                              "ort_cpu", "--precision", "fp32", "--calibration-method", "entropy", "--inline"])
    out, err = io.StringIO(), io.StringIO()
    assert run_engines(args, out, err) == 0, err.getvalue()
    assert "--calibration-method entropy applies to INT8 builds only" in err.getvalue()
