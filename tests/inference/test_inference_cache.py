"""Engine cache: keys, manifests, and rebuilding corrupt, truncated and foreign entries."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from avatar_app.inference import CacheKey, EngineCache, EngineManager, Precision
from avatar_app.inference.cache import MANIFEST_NAME, MANIFEST_SCHEMA
from avatar_app.inference.dirs import user_cache_dir, user_data_dir
from avatar_app.inference.modelinfo import ModelInfo, sha256_file


def test_user_dirs(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "c"))
    assert user_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("AVATAR_APP_CACHE_DIR")
    monkeypatch.delenv("AVATAR_APP_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdgdata"))
    assert user_cache_dir() == tmp_path / "xdg" / "avatar-app"
    assert user_data_dir() == tmp_path / "xdgdata" / "avatar-app"
    assert EngineManager().cache.root == tmp_path / "xdg" / "avatar-app"


def test_manifest_complete_and_reused(tiny_models, manager):
    entry = manager.build(tiny_models["conv"], "ort_cpu", "fp16")
    raw = json.loads((entry.folder / MANIFEST_NAME).read_text())
    info = ModelInfo.from_onnx(tiny_models["conv"])
    assert raw["schema"] == MANIFEST_SCHEMA and raw["model_name"] == "conv"
    assert raw["key"]["onnx_sha256"] == info.sha256 and raw["key"]["precision"] == "fp16"
    assert raw["key"]["backend"] == "ort_cpu" and raw["key"]["backend_version"]
    assert raw["key"]["device"] == "cpu"
    assert raw["artifact_sha256"] == sha256_file(entry.artifact_path)
    assert raw["artifact_size"] == entry.artifact_path.stat().st_size
    assert raw["build_time_s"] > 0 and raw["status"] == "ok" and raw["load_checked"]
    assert raw["verification"]["max_abs_error"] < 1e-2
    again = manager.build(tiny_models["conv"], "ort_cpu", "fp16")
    assert again.folder == entry.folder and again.manifest.built_at == entry.manifest.built_at
    forced = manager.build(tiny_models["conv"], "ort_cpu", "fp16", force=True)
    assert forced.manifest.built_at > entry.manifest.built_at


def test_key_digest_separates_configurations():
    k = CacheKey("a" * 64, "fp16", "tensorrt_rtx", "1.7", "RTX 4070 sm89", "{}")
    assert len({k.digest(), replace(k, precision="fp32").digest(), replace(k, device="cpu").digest(),
                replace(k, backend_version="1.8").digest(), replace(k, profile="x").digest()}) == 5


def _damage(kind, entry):
    art, man = entry.artifact_path, entry.folder / MANIFEST_NAME
    if kind == "corrupt":
        data = bytearray(art.read_bytes())
        data[len(data) // 2] ^= 0xFF
        art.write_bytes(bytes(data))
    elif kind == "truncated":
        art.write_bytes(art.read_bytes()[: art.stat().st_size // 3])
    elif kind == "foreign_schema":
        raw = json.loads(man.read_text())
        raw["schema"] = MANIFEST_SCHEMA + 41
        man.write_text(json.dumps(raw))
    elif kind == "foreign_key":  # written by another runtime version into this folder
        raw = json.loads(man.read_text())
        raw["key"]["backend_version"] = "0.0.1"
        man.write_text(json.dumps(raw))
    elif kind == "garbage_manifest":
        man.write_text("{not json")
    elif kind == "no_manifest":  # an interrupted build
        man.unlink()
    elif kind == "no_artifact":
        art.unlink()


@pytest.mark.parametrize("kind", ["corrupt", "truncated", "foreign_schema", "foreign_key",
                                  "garbage_manifest", "no_manifest", "no_artifact"])
def test_damaged_entry_is_rebuilt(tiny_models, manager, kind, caplog):
    first = manager.build(tiny_models["matmul"], "ort_cpu", "int8")
    _damage(kind, first)
    with caplog.at_level("WARNING"):
        result = manager.open_engine(tiny_models["matmul"], "ort_cpu", "int8")
    with result.runner as r:
        assert (r.backend, r.precision) == ("ort_cpu", Precision.INT8)
        assert not result.attempts[0].cached  # rebuilt, not loaded from the damaged entry
        assert r.verification.passed
    assert "will be rebuilt" in caplog.text
    rebuilt = manager.cache.lookup(manager.cache_key(ModelInfo.from_onnx(tiny_models["matmul"]), "ort_cpu",
                                                     Precision.INT8), "matmul")
    assert rebuilt is not None and rebuilt.manifest.built_at > first.manifest.built_at
    assert rebuilt.manifest.artifact_sha256 == sha256_file(rebuilt.artifact_path)


def test_entries_and_clear(tiny_models, manager):
    manager.build(tiny_models["conv"], "ort_cpu", "fp16")
    e2 = manager.build(tiny_models["matmul"], "ort_cpu", "fp16")
    e2.artifact_path.write_bytes(b"x")
    listed = manager.cache.entries()
    assert len(listed) == 2
    problems = [p for _, e, p in listed if e is None]
    assert len(problems) == 1 and "truncated" in problems[0]
    assert manager.cache.clear("conv")[0] == 1
    assert manager.cache.clear()[0] == 1 and manager.cache.entries() == []
    with pytest.raises(ValueError, match="not an engine cache entry"):
        EngineCache(manager.cache.root).remove(manager.cache.root)
