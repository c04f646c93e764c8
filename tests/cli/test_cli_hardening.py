"""The engines and render CLIs as a new user meets them (issue 21, item 2): errors on stderr with
README's exit statuses, plain messages, option ranges in --help."""
from __future__ import annotations

import argparse
import io
import json
import shutil

import pytest

from avatar_app.core.errors import BackendUnavailableError
from avatar_app.inference.backends import (
    BackendStatus,
    OrtBackend,
    register_backend,
    unregister_backend,
)
from avatar_app.inference.base import Precision
from avatar_app.inference.cache import EngineCache
from avatar_app.inference.cli import add_engines_parser, run_engines
from tests.helpers import run_cli, run_main


def _cuda_provider_offered() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _run(*argv) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="avatar-app")
    add_engines_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    return run_engines(parser.parse_args(list(argv)), out), out.getvalue()


def _one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "error" not in proc.stdout, proc.stdout
    return lines[0]


def test_missing_model_path_is_named_plainly_on_stderr(user_dirs):
    proc = run_cli("engines", "build", "--model", "/tmp/x/does_not_exist.onnx", "--inline")
    assert proc.returncode == 1, proc.stderr  # README: 1, a missing model
    line = _one_error_line(proc)
    assert "'/tmp/x/does_not_exist.onnx'" in line and "models//" not in line and ".onnx.onnx" not in line, line


def test_missing_model_name_lists_the_shipped_models(user_dirs):
    proc = run_main("engines", "list", "--model", "no_such_model")
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "no_such_model" in line and "face_detection, face_landmark, face_recon, speech2face" in line, line


@pytest.mark.skipif(_cuda_provider_offered(), reason="this onnxruntime has CUDA: ort_cuda may run here")
def test_backend_that_cannot_run_here_exits_2(user_dirs):
    proc = run_main("engines", "build", "--model", "face_recon", "--backend", "ort_cuda", "--inline")
    assert proc.returncode == 2, proc.stderr  # README: 2, cannot run on this machine
    assert "CUDAExecutionProvider" in _one_error_line(proc)


def test_unknown_backend_is_a_bad_option_on_stderr(user_dirs):
    proc = run_main("engines", "build", "--model", "face_recon", "--backend", "nosuch", "--inline")
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert "nosuch" in line and "ort_cpu" in line, line


class _BuildOnly(OrtBackend):
    """ONNX Runtime CPU under another name that builds here but cannot run here (like TensorRT without a GPU)."""

    def __init__(self):
        super().__init__("buildonly", "CPUExecutionProvider", (Precision.FP32,))

    def status(self) -> BackendStatus:
        st = super().status()
        st.can_run, st.reason = False, "engines can be built but not run here: no GPU"
        return st


@pytest.fixture
def build_only_backend():
    register_backend(_BuildOnly(), replace=True)
    yield "buildonly"
    unregister_backend("buildonly")


def test_clear_unused_removes_engines_that_cannot_run_here(tiny_models, user_dirs, build_only_backend):
    model = str(tiny_models["matmul"])
    rc, text = _run("engines", "build", "--model", model, "--backend", build_only_backend, "--inline")
    assert rc == 2 and "unverified" in text, text  # built, cannot run here
    rc, text = _run("engines", "build", "--model", model, "--backend", "ort_cpu", "--inline")
    assert rc == 0, text
    rc, text = _run("engines", "list")
    assert "cannot run on this machine" in text and "(unused by the app)" in text, text
    rc, text = _run("engines", "clear", "--unused")
    assert rc == 0 and "removed 1 unused cached engine(s)" in text, text
    (entry,) = [e for _, e, _ in EngineCache().entries()]
    assert entry.manifest.key["backend"] == "ort_cpu"


def test_clear_unused_removes_engines_of_another_device_or_backend(tiny_models, user_dirs):
    model = str(tiny_models["matmul"])
    rc, text = _run("engines", "build", "--model", model, "--backend", "ort_cpu", "--inline")
    assert rc == 0, text
    (folder, _, _), = EngineCache().entries()
    shutil.copytree(folder, folder.with_name(folder.name + "-gone"))
    for f, key in ((folder, {"device": "NVIDIA GeForce RTX 4070 sm89"}), (folder.with_name(folder.name + "-gone"),
                                                                          {"backend": "removed_backend"})):
        data = json.loads((f / "manifest.json").read_text())
        data["key"].update(key)
        (f / "manifest.json").write_text(json.dumps(data))
    rc, text = _run("engines", "list")
    assert "built for NVIDIA GeForce RTX 4070 sm89" in text and "unknown backend removed_backend" in text, text
    rc, text = _run("engines", "clear", "--unused")
    assert "removed 2 unused" in text, text


def test_fps_help_gives_its_range():
    proc = run_main("render", "--help")
    text = " ".join(proc.stdout.split())
    assert "--fps N" in text and "1..240" in text, proc.stdout


@pytest.mark.parametrize("size, says", [("641x480", "must be even"), ("640x481", "must be even"),
                                        ("8000x480", "out of range"), ("8x8", "out of range")])
def test_size_errors_say_what_is_wrong(size, says, tmp_path):
    proc = run_main("render", str(tmp_path / "in.mp4"), "-o", str(tmp_path / "o.mp4"), "--size", size)
    assert proc.returncode == 2
    assert says in proc.stderr and ("out of range" in proc.stderr) == (says == "out of range"), proc.stderr


@pytest.mark.parametrize("flag", ["input", "--audio"])
def test_an_empty_input_file_is_called_empty(flag, tmp_path, testdata):
    empty = tmp_path / "clip.mp4"
    empty.touch()
    video = empty if flag == "input" else testdata / "video" / "grid_s1_bbaf2n.mp4"
    extra = ["--audio", str(empty)] if flag == "--audio" else []
    proc = run_main("render", str(video), "-o", str(tmp_path / "o.mp4"), "--size", "160x120", "-q", *extra)
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "clip.mp4" in line and "is empty (0 bytes)" in line, line
    assert not (tmp_path / "o.mp4").exists()


def test_run_engines_maps_backend_errors_to_status_2(monkeypatch):
    """In-process callers get the same statuses as the command line."""
    import avatar_app.inference.cli as cli

    def boom(args, out):
        raise BackendUnavailableError("tensorrt is not installed")

    monkeypatch.setattr(cli, "_build", boom)
    args = argparse.Namespace(engines_command="build")
    out, err = io.StringIO(), io.StringIO()
    assert run_engines(args, out, err) == 2
    assert out.getvalue() == "" and err.getvalue() == "error: tensorrt is not installed\n"




@pytest.mark.gl
def test_render_says_which_speech_backend_drove_the_mouth(testdata, tmp_path):
    import subprocess

    clip = tmp_path / "short.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-t", "0.6",
                    str(clip)], check=True, timeout=60)
    proc = run_main("render", str(clip), "-o", str(tmp_path / "o.mp4"), "--size", "160x120", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "mouth from speech2face.onnx on ort_cpu" in proc.stdout, proc.stdout  # the shipped speech engine
    proc = run_main("render", str(clip), "-o", str(tmp_path / "o.mp4"), "--size", "160x120", "-q", "--no-audio")
    assert proc.returncode == 0, proc.stderr
    assert "mouth from the video alone" in proc.stdout, proc.stdout


def test_help_says_what_no_command_does_and_render_help_gives_the_exit_statuses():
    """A new user's first two commands: `avatar-app --help` says that no command opens the studio window,
    `render --help` has an example and the exit statuses of README's table."""
    top = " ".join(run_main("--help").stdout.split())
    assert "Without a command, opens the studio window" in top and "avatar-app --source talk.mp4" in top, top
    render = run_main("render", "--help")
    assert render.returncode == 0
    text = " ".join(render.stdout.split())
    assert "avatar-app render talk.mp4 -o avatar.mp4" in text, text
    for said in ("0 done", "2 bad input", "3 no face", "4 the output cannot be written", "130 / 143"):
        assert said in text, (said, text)
    assert "-o OUT.mp4" in text and "OUT.blendshapes.jsonl" in text and "--size WxH" in text, text
