"""Runner protocol, specs, registry and lazy imports of avatar_app.inference."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import CrashingBackend

from avatar_app.core.errors import BackendUnavailableError, InputError, ModelLoadError
from avatar_app.inference import Precision, TensorSpec, candidate_plan, register_backend
from avatar_app.inference.backends import backend_names, get_backend, unregister_backend
from avatar_app.inference.base import BaseRunner
from avatar_app.inference.ort import OrtRunner

ROOT = Path(__file__).resolve().parents[2]


class EchoRunner(BaseRunner):
    """Minimal runner: y = 2 * x."""

    backend = "echo"

    def _open_impl(self):
        self._input_specs = (TensorSpec("x", np.dtype(np.float32), (None, 3), ("B", None)),
                             TensorSpec("t", np.dtype(np.float32), (None,), ("B",)))
        self._output_specs = (TensorSpec("y", np.dtype(np.float32), (None, 3), ("B", None)),)
        self.closed = False

    def _infer_impl(self, feeds):
        return {"y": feeds["x"] * 2}

    def _close_impl(self):
        self.closed = True


def test_precision_parse():
    assert Precision.parse("FP16") is Precision.FP16
    assert Precision.parse(Precision.INT8) is Precision.INT8
    with pytest.raises(InputError, match="unknown precision 'fp8'"):
        Precision.parse("fp8")


def test_runner_checks_feeds_in_base():
    r = EchoRunner(name="echo")
    with pytest.raises(ModelLoadError, match="not open"):
        r.infer({"x": np.zeros((1, 3), np.float32)})
    with r:
        ok = {"x": np.ones((2, 3), np.float32), "t": np.zeros(2, np.float32)}
        out = r.infer(ok)
        np.testing.assert_array_equal(out["y"], 2 * ok["x"])
        assert r.last_latency_ms is not None and r.last_latency_ms >= 0
        with pytest.raises(InputError, match="missing \\['t'\\]"):
            r.infer({"x": ok["x"]})
        with pytest.raises(InputError, match="unknown \\['z'\\]"):
            r.infer({**ok, "z": ok["x"]})
        with pytest.raises(InputError, match="dtype float32, got float64"):
            r.infer({**ok, "x": ok["x"].astype(np.float64)})
        with pytest.raises(InputError, match="dimension 1 must be 3"):
            r.infer({**ok, "x": np.zeros((2, 4), np.float32)})
        with pytest.raises(InputError, match="must have 2 dimensions"):
            r.infer({**ok, "x": np.zeros(3, np.float32)})
        with pytest.raises(InputError, match="dimension 'B' is 2 in input 'x' but 5 in input 't'"):
            r.infer({**ok, "t": np.zeros(5, np.float32)})
        with pytest.raises(InputError, match="dict of input name"):
            r.infer([ok["x"]])
    assert r.closed and not r.is_open


def test_ort_runner_specs_and_provider(tiny_models):
    with OrtRunner.from_path(tiny_models["layernorm"]) as r:
        (spec,) = r.input_specs
        assert spec.name == "x" and spec.dtype == np.float32
        assert spec.shape == (None, None, 32) and spec.dim_names == ("B", "T", None)
        assert spec.shape_str() == "[B, T, 32]"
        assert r.output_specs[0].name == "y"
        assert r.providers == ["CPUExecutionProvider"]
        assert r.backend == "ort_cpu" and r.precision is Precision.FP32
        assert "CPUExecutionProvider" in r.describe()


def test_registry_order_and_errors():
    names = backend_names()
    assert names[-1] == "ort_cpu"
    assert names.index("tensorrt") < names.index("tensorrt_rtx") < names.index("ort_cuda")
    with pytest.raises(BackendUnavailableError, match="unknown backend 'nope'"):
        get_backend("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_backend(get_backend("ort_cpu"))
    assert backend_names(["ort_cuda", "tensorrt_rtx"])[:2] == ["ort_cuda", "tensorrt_rtx"]


def test_candidate_plan_orders_user_choice_then_fallbacks():
    plan = candidate_plan("tensorrt_rtx", "int8")
    assert plan[:3] == [("tensorrt_rtx", Precision.INT8), ("tensorrt_rtx", Precision.FP16),
                        ("tensorrt_rtx", Precision.FP32)]
    assert plan[-1] == ("ort_cpu", Precision.FP32)
    assert len(plan) == len(set(plan))
    # A GRU-like model without INT8: INT8 candidates are dropped.
    plan = candidate_plan("ort_cpu", "int8", model_precisions=(Precision.FP32, Precision.FP16))
    assert ("ort_cpu", Precision.INT8) not in plan and plan[0] == ("ort_cpu", Precision.FP16)
    # No choice: defaults, fastest first, CPU FP32 last.
    plan = candidate_plan()
    assert plan[0] == ("tensorrt", Precision.FP16) and plan[-1] == ("ort_cpu", Precision.FP32)
    # A registered extra backend takes part.
    register_backend(CrashingBackend())
    try:
        assert ("crashy", Precision.FP32) in candidate_plan()
    finally:
        unregister_backend("crashy")


def test_package_imports_without_optional_backends(tmp_path):
    """With tensorrt, tensorrt_rtx, cuda, onnxruntime and onnx all unimportable."""
    code = textwrap.dedent("""
        import importlib.abc, json, sys
        BLOCK = ("tensorrt", "tensorrt_rtx", "cuda", "onnxruntime", "onnx", "onnxconverter_common")
        class Blocker(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCK:
                    raise ImportError(f"No module named {name!r} (blocked)")
        sys.meta_path.insert(0, Blocker())
        import avatar_app.inference as inf
        import avatar_app.inference.cli, avatar_app.inference.swap
        st = {s.name: [s.installed, s.can_run, s.reason] for s in inf.backend_statuses()}
        plan = inf.candidate_plan()
        print(json.dumps({"st": st, "plan": [b for b, _ in plan],
                          "loaded": [m for m in BLOCK if m in sys.modules]}))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["loaded"] == []
    for name in ("tensorrt", "tensorrt_rtx", "ort_cpu", "ort_cuda"):
        installed, can_run, reason = data["st"][name]
        assert not installed and not can_run and "not installed" in reason
    assert data["plan"][-1] == "ort_cpu"
