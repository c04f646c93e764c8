"""Models whose card says ``real_data_only`` build FP16/INT8 only with a real validation set (trial finding:
an INT8 face mesh calibrated and "verified" on random images lost every real face)."""
from __future__ import annotations

import json
import shutil

import pytest

from avatar_app.inference.calibration import real_data_missing
from avatar_app.inference.modelinfo import ModelInfo


def _copy(tiny_models, folder, with_val: bool, flag: bool = True):
    src = tiny_models["matmul"]
    dst = folder / "realonly.onnx"
    shutil.copy(src, dst)
    card_src = src.with_suffix(".card.json")
    card = json.loads(card_src.read_text()) if card_src.is_file() else {}
    card["real_data_only"] = flag
    dst.with_suffix(".card.json").write_text(json.dumps(card))
    if with_val:
        shutil.copy(src.with_name(src.stem + ".val.npz"), folder / "realonly.val.npz")
    return dst


def test_reduced_precisions_refused_without_a_real_validation_set(tmp_path, tiny_models, manager):
    path = _copy(tiny_models, tmp_path, with_val=False)
    info = ModelInfo.from_onnx(path)
    assert real_data_missing(info, "fp32") == ""
    for prec in ("fp16", "int8"):
        why = real_data_missing(info, prec)
        assert "real face crops" in why and prec.upper() in why and info.validation_path.name in why
        assert "make_sets" not in why and "FP32 serves" not in why  # a pip install has no training/ folder
    result = manager.open_engine(path, "ort_cpu", "int8")
    assert result.runner.precision.value == "fp32"
    refused = [a for a in result.attempts if a.precision == "int8"]
    assert refused and not refused[0].ok and "real face crops" in refused[0].reason
    # nothing was built from random inputs: the cache holds no INT8 engine of it
    assert not list((manager.cache.root).rglob("realonly*int8*"))
    result.runner.close()
    from avatar_app.core.errors import EngineBuildError

    with pytest.raises(EngineBuildError, match="real face crops"):  # `engines build` says so too
        manager.build(path, "ort_cpu", "int8")


def test_with_a_real_validation_set_the_precision_is_built(tmp_path, tiny_models, manager):
    path = _copy(tiny_models, tmp_path, with_val=True)
    info = ModelInfo.from_onnx(path)
    assert real_data_missing(info, "int8") == ""
    result = manager.open_engine(path, "ort_cpu", "fp16")
    assert result.runner.precision.value == "fp16", [str(a) for a in result.attempts]
    result.runner.close()


def test_models_without_the_flag_keep_random_input_verification(tmp_path, tiny_models):
    path = _copy(tiny_models, tmp_path, with_val=False, flag=False)
    assert real_data_missing(ModelInfo.from_onnx(path), "int8") == ""


def test_the_shipped_landmark_cards_set_the_flag():
    from avatar_app.resources import resource_path

    for name in ("face_detection", "face_landmark"):
        card = json.loads(resource_path(f"models/{name}.card.json").read_text())
        assert card.get("real_data_only") is True, name


def test_engines_build_exits_2_when_the_precision_cannot_be_verified_here(tmp_path, tiny_models, capsys):
    """New-user trial: `engines build` of face_landmark INT8 without real face crops exited 1, the
    status of a failed build; README's 2 is for an engine this machine cannot run."""
    import argparse

    from avatar_app.inference import cli as icli

    path = _copy(tiny_models, tmp_path, with_val=False)
    args = argparse.Namespace(engines_command="build", model=str(path), backend="ort_cpu", precision="int8",
                              calibration_method="percentile", force=False, inline=True)
    assert icli.run_engines(args) == 2
    assert "real face crops" in capsys.readouterr().err


def test_engines_list_names_a_model_file_that_cannot_be_read(tmp_path, tiny_models, monkeypatch, capsys):
    """Second trial: with a corrupt face_recon.onnx, `engines list` exited 0 and said nothing of it."""
    import argparse

    from avatar_app.inference import cli as icli

    bad = tmp_path / "face_recon.onnx"
    bad.write_bytes(b"not an onnx file" * 10)
    good = _copy(tiny_models, tmp_path, with_val=False)
    monkeypatch.setattr(icli, "_shipped_models", lambda: [bad, good])
    assert icli.run_engines(argparse.Namespace(engines_command="list", model=[])) == 0
    out = capsys.readouterr().out
    assert "face_recon: cannot be read" in out and "realonly: cannot" not in out
