"""avatar_app.inference.gpu_detect: user-installed TensorRT / onnxruntime-gpu found without importing them."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

import pytest

from avatar_app.inference import gpu_detect
from avatar_app.inference.gpu_detect import EXTRA_SITE_ENV, add_extra_site_dirs, detect_gpu_runtimes, extra_site_dirs


def _fake_dist(site: Path, dist: str, version: str, top: str, body: str) -> None:
    """A package ``top`` in ``site`` with the metadata of distribution ``dist``."""
    pkg = site / top
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(top + "\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n")


@pytest.fixture
def clean_import_state(monkeypatch):
    """Restore sys.path / sys.meta_path after a test that changes them."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    yield
    importlib.invalidate_caches()


def test_tensorrt_is_found_without_being_imported(tmp_path, monkeypatch, clean_import_state):
    site = tmp_path / "site"
    _fake_dist(site, "tensorrt-cu12", "10.9.0", "tensorrt", "raise RuntimeError('tensorrt must not be imported')\n")
    monkeypatch.syspath_prepend(str(site))
    report = detect_gpu_runtimes(probe_onnxruntime=False)
    trt = {r.name: r for r in report.runtimes}["tensorrt"]
    assert trt.available and trt.version == "10.9.0"
    assert trt.location == site / "tensorrt"
    assert "tensorrt" not in sys.modules
    assert "TensorRT 10.9.0" in report.summary()


def test_installed_runtimes_match_find_spec():
    report = detect_gpu_runtimes(probe_onnxruntime=False)
    for name, _label in gpu_detect.TRT_MODULES:
        entry = {r.name: r for r in report.runtimes}[name]
        assert entry.available == (importlib.util.find_spec(name) is not None)
        assert entry.available or "not installed" in entry.reason
    assert not report.frozen


def test_cpu_onnxruntime_is_not_offered_as_gpu(monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    ort = detect_gpu_runtimes().runtimes[-1]
    assert ort.name == "onnxruntime-gpu" and not ort.available
    assert "onnxruntime-gpu" in ort.reason and ort.providers == ()


def test_onnxruntime_gpu_providers_are_reported(monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    report = detect_gpu_runtimes()
    ort = report.runtimes[-1]
    assert ort.available and ort.providers == ("TensorrtExecutionProvider", "CUDAExecutionProvider")
    assert "CUDAExecutionProvider" in report.summary()


def test_summary_without_runtimes_points_bundle_users_at_the_variable():
    none = gpu_detect.GpuRuntime("tensorrt", "TensorRT", False, reason="x")
    assert "CPU" in gpu_detect.GpuReport((none,), frozen=False).summary()
    assert EXTRA_SITE_ENV in gpu_detect.GpuReport((none,), frozen=True).summary()


def test_extra_site_dirs_skip_missing_folders(tmp_path, caplog):
    good = tmp_path / "good"
    good.mkdir()
    env = {EXTRA_SITE_ENV: os.pathsep.join([str(good), str(tmp_path / "missing"), ""])}
    with caplog.at_level(logging.WARNING, logger="avatar_app.inference.gpu_detect"):
        assert extra_site_dirs(env) == (good.resolve(),)
    assert "missing" in caplog.text


def test_extra_site_makes_tensorrt_rtx_importable(tmp_path, clean_import_state):
    site = tmp_path / "user-site"
    _fake_dist(site, "tensorrt-rtx-cu13", "1.2.3", "fake_trt_rtx_mod", "VALUE = 7\n")
    dirs = add_extra_site_dirs({EXTRA_SITE_ENV: str(site)})
    assert dirs == (site.resolve(),)
    assert sys.path[-1] == str(site.resolve())  # appended: bundled packages keep priority
    assert add_extra_site_dirs({EXTRA_SITE_ENV: str(site)}) == dirs
    assert sys.path.count(str(site.resolve())) == 1
    assert importlib.util.find_spec("fake_trt_rtx_mod") is not None


def test_extra_site_onnxruntime_gpu_replaces_the_bundled_one(tmp_path, monkeypatch, clean_import_state):
    site = tmp_path / "gpu-site"
    _fake_dist(site, "onnxruntime-gpu", "1.22.0", "onnxruntime",
               "__version__ = '1.22.0'\n"
               "def get_available_providers():\n"
               "    return ['CUDAExecutionProvider', 'CPUExecutionProvider']\n")
    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    add_extra_site_dirs({EXTRA_SITE_ENV: str(site)})
    ort = detect_gpu_runtimes().runtimes[-1]
    assert ort.available and ort.version == "1.22.0" and ort.providers == ("CUDAExecutionProvider",)
    assert Path(sys.modules["onnxruntime"].__file__).parent == (site / "onnxruntime").resolve()
    monkeypatch.delitem(sys.modules, "onnxruntime")  # the real one comes back on teardown
