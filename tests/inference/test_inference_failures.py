"""Failed builds are remembered per cache key, with a retry; messages name the model, not a temporary
file; a CUDA provider that cannot load is not "ready" (issue 21, item 12)."""
from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import pytest

from avatar_app.core.errors import AvatarError, EngineBuildError
from avatar_app.inference import manager as manager_mod
from avatar_app.inference.backends import OrtBackend, get_backend, register_backend, unregister_backend
from avatar_app.inference.base import Precision
from avatar_app.inference.cache import EngineCache
from avatar_app.inference.cli import add_engines_parser, run_engines
from avatar_app.inference.manager import EngineManager

from inference_helpers import CrashingBackend


class _FailingBackend(OrtBackend):
    """ONNX Runtime CPU under another name whose build fails (a TensorRT parser error stand-in)."""

    builds = 0

    def __init__(self):
        super().__init__("failing", "CPUExecutionProvider", (Precision.FP32,))

    def build(self, info, precision_onnx, out_path, progress=None) -> dict:
        type(self).builds += 1
        raise EngineBuildError(f"TensorRT could not build {info.path.name}: unsupported operator")


@pytest.fixture
def failing():
    _FailingBackend.builds = 0
    register_backend(_FailingBackend(), replace=True)
    yield "failing"
    unregister_backend("failing")


def _run(*argv) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="avatar-app")
    add_engines_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    return run_engines(parser.parse_args(list(argv)), out, out), out.getvalue()


def test_a_failed_build_is_remembered_and_not_retried_on_the_next_start(tiny_models, user_dirs, failing):
    model = tiny_models["matmul"]
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)
    with pytest.raises(EngineBuildError, match="unsupported operator"):
        mgr.build(model, failing, "fp32")
    assert _FailingBackend.builds == 1
    # the next start: a new manager on the same cache opens without building again
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)
    result = mgr.open_engine(model, failing, "fp32")
    result.runner.close()
    assert _FailingBackend.builds == 1
    first = result.attempts[0]
    assert first.backend == failing and not first.ok
    assert "failed before" in first.reason and "unsupported operator" in first.reason, first.reason
    failure = mgr.build_failure(model, failing, "fp32")
    assert failure is not None and "unsupported operator" in failure.reason and failure.when > 0
    # the API the Engines panel's "retry" uses: try once more, now
    with pytest.raises(EngineBuildError, match="unsupported operator"):
        mgr.retry(model, failing, "fp32")
    assert _FailingBackend.builds == 2


def test_engines_build_retries_explicitly_and_list_shows_the_failure(tiny_models, user_dirs, failing):
    model = str(tiny_models["matmul"])
    rc, text = _run("engines", "build", "--model", model, "--backend", failing, "--inline")
    assert rc == 1 and "unsupported operator" in text
    rc, text = _run("engines", "list")
    assert "failed builds" in text.lower() and "matmul fp32 failing" in text and "unsupported operator" in text, text
    rc, text = _run("engines", "build", "--model", model, "--backend", failing, "--inline")
    assert rc == 1 and _FailingBackend.builds == 2  # an explicit build always tries again
    rc, text = _run("engines", "clear")
    assert rc == 0
    assert EngineManager(isolate=False).build_failure(model, failing, "fp32") is None


def test_a_crash_in_the_child_is_remembered_too(tiny_models, user_dirs, monkeypatch):
    register_backend(CrashingBackend(), replace=True)
    spawned = []
    real = manager_mod.run_isolated
    monkeypatch.setattr(manager_mod, "run_isolated", lambda *a, **k: (spawned.append(1), real(*a, **k))[1])
    try:
        for _ in range(2):
            mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=True, timeout_s=120)
            result = mgr.open_engine(tiny_models["matmul"], "crashy", "fp32")
            result.runner.close()
        assert len(spawned) == 1, "the second start built the crashing engine again"
        assert "killed by SIGSEGV" in result.attempts[0].reason and "failed before" in result.attempts[0].reason
    finally:
        unregister_backend("crashy")


def test_build_failure_names_the_model_not_a_temporary_file(tiny_models, user_dirs, monkeypatch):
    """An engine file that does not load at verification: the reason names the model."""
    def garbage(info, precision_onnx, out_path, progress=None) -> dict:
        Path(out_path).write_bytes(b"not an onnx file")
        return {}

    monkeypatch.setattr(get_backend("ort_cpu"), "build", garbage)
    mgr = EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)
    with pytest.raises(AvatarError) as info:
        mgr.build(tiny_models["matmul"], "ort_cpu", "fp32", force=True)
    text = str(info.value)
    assert "matmul.onnx" in text and ".artifact" not in text and "tmp" not in text, text


def test_cuda_provider_that_cannot_load_is_not_ready(monkeypatch):
    """onnxruntime-gpu offers CUDAExecutionProvider even where CUDA or cuDNN cannot load."""
    from avatar_app.inference import ort

    if "CUDAExecutionProvider" in ort.ort_available_providers():
        pytest.skip("this onnxruntime offers CUDA: the probe would really run on it")
    monkeypatch.setattr(ort, "ort_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    probe = getattr(ort, "provider_load_problem", None)  # absent before the fix
    if probe is not None:
        probe.cache_clear()
    try:
        st = get_backend("ort_cuda").status()
    finally:
        if probe is not None:
            probe.cache_clear()
    assert not st.can_run and not st.can_build, st
    assert "CUDAExecutionProvider" in st.reason and "load" in st.reason, st.reason
    rc_list = np.array([st.precisions[p.value] is not None for p in Precision])
    assert rc_list.all()
