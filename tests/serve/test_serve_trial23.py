"""trial23: ``render --remote`` that could not use the server says why, and that the engines ran locally.

The trial's render (no server, no tritonclient, ``--face engine``) warned "the geometric
solver and the loudness solver need none" while its summary said face_recon.onnx and
speech2face.onnx ran on the local CPU. render_file is replaced by a stub returning the
report of such a render, so no video is decoded here.
"""
from __future__ import annotations

import pytest

import avatar_app.inference.remote as remote
import avatar_app.inference.triton_client as triton_client
import avatar_app.pipeline as pipeline
from avatar_app.pipeline.offline import RenderReport
from avatar_app.serve.remote_render import render_file_remote

URL = "grpc://127.0.0.1:1"  # nothing listens on port 1


def _render(monkeypatch, tmp_path, face_solver: str, speech_backend: str) -> list[str]:
    def fake_render_file(inp, out, options, progress=None, reconstructor=None, speech=None, stop=None):
        return RenderReport(output_path=out, sidecar_path=None, frames_in=3, frames_out=3, duration_s=0.1,
                            face_solver=face_solver, speech_backend=speech_backend)

    monkeypatch.setattr(pipeline, "render_file", fake_render_file)
    for mod in (triton_client, remote):  # as without the [serve] extra
        monkeypatch.setattr(mod, "tritonclient_version", lambda: None)
    return render_file_remote(URL, tmp_path / "in.mp4", tmp_path / "out.mp4").warnings


def test_engines_that_ran_locally_are_named_with_why(monkeypatch, tmp_path):
    warnings = _render(monkeypatch, tmp_path, "face_recon.onnx on ort_cpu (fp32) [CPUExecutionProvider]",
                       "speech2face.onnx on ort_cpu (fp32) [CPUExecutionProvider]")
    line = next(w for w in warnings if URL in w)
    assert "need none" not in line and "loudness" not in line and "geometric" not in line, line
    assert "tritonclient is not installed" in line, line
    assert "ran locally" in line and "face_recon.onnx on ort_cpu" in line and "speech2face.onnx" in line, line


@pytest.mark.parametrize("face, speech", [("geometric solver", "loudness solver"), ("geometric solver", "")])
def test_builtin_solvers_are_named_as_they_ran(monkeypatch, tmp_path, face, speech):
    line = next(w for w in _render(monkeypatch, tmp_path, face, speech) if URL in w)
    assert "need none" in line and face in line, line
    assert ("loudness" in line) == bool(speech), line
