"""ONNX Runtime's telemetry warning stays off stderr (trial 20 finding 4): where its device ID cannot be
persisted (a home it cannot write), importing onnxruntime printed an ANSI-coloured warning, so an error
of `render` was no longer one line on stderr. ONNX Runtime's own opt-out (ORT_DISABLE_TELEMETRY, set by
avatar_app.inference.ort_env before onnxruntime is imported) stops it; ORT's errors still surface."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
_CI_VARS = ("CI", "GITHUB_ACTIONS", "TF_BUILD", "JENKINS_URL", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "TRAVIS",
            "ORT_RUNNING_UNIT_TESTS", "ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED", "XDG_CACHE_HOME")


def _env() -> dict[str, str]:
    """The user's environment with a home nobody can write (/proc: not even root), no opt-out, no CI."""
    env = {k: v for k, v in os.environ.items() if k not in _CI_VARS}
    env["HOME"] = "/proc/no-home"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _py(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=_env(), cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_opt_out_is_set_before_onnxruntime_loads_and_a_users_own_value_is_kept(tmp_path):
    code = ("import os, sys\nimport avatar_app.inference\n"
            "print(os.environ.get('ORT_DISABLE_TELEMETRY'), 'onnxruntime' in sys.modules)")
    assert _py(code, tmp_path).stdout.split() == ["1", "False"]
    env = dict(_env(), ORT_DISABLE_TELEMETRY="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.split() == ["0", "False"], r.stdout + r.stderr


def test_importing_the_engine_layer_first_keeps_the_warning_off_stderr(tmp_path):
    """(onnxruntime 1.32 prints the warning on a plain import with this home; whatever the version,
    nothing may reach stderr.)"""
    r = _py("import avatar_app.inference, onnxruntime", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr


def test_a_render_error_is_one_line_on_stderr_with_an_unwritable_home(short_grid_clip, tmp_path):
    r = subprocess.run([sys.executable, "-m", "avatar_app", "render", str(short_grid_clip), "-o", "/proc/x.mp4",
                        "--size", "96x64", "-q"], env=_env(), cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 4, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "\x1b" not in r.stderr, r.stderr


def test_onnx_runtime_errors_still_surface_through_our_messages(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    r = _py("from avatar_app.inference.ort import SessionFromOnnx\n"
            "try:\n    SessionFromOnnx('bad.onnx')()\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n", tmp_path)
    assert r.stdout.startswith("ModelLoadError ONNX Runtime cannot load bad.onnx: "), r.stdout + r.stderr
    assert "ONNXRuntimeError" in r.stdout, r.stdout  # ORT's own reason is kept in our message
    assert r.stderr == "", r.stderr
