"""render's summary line names the face tracker, and after a server went away the local engine that
finished the render (issue 21, trial fixes 4)."""
from __future__ import annotations


import pytest

from avatar_app.inference.remote import SwitchEvent
from avatar_app.pipeline.offline import RenderReport
from avatar_app.serve.remote_render import _FrameClock, finished_locally
from tests.helpers import run_main


@pytest.mark.parametrize(("tracker", "named"), [("mediapipe", "tracked by MediaPipe face mesh"),
                                                ("onnx", "tracked by ONNX tracker: face_detection.onnx")])
def test_the_summary_names_the_tracker_that_ran(short_grid_clip, tmp_path, tracker, named):
    r = run_main("render", str(short_grid_clip), "-o", str(tmp_path / "o.mp4"), "--size", "96x64", "-q",
                 "--tracker", tracker)
    assert r.returncode == 0, r.stderr
    assert named in r.stdout, r.stdout


class _Local:
    def describe(self) -> str:
        return "speech2face.onnx on ort_cpu (fp32)"


class _Runner:
    local = _Local()

    def __init__(self, events):
        self.events = events


def test_after_a_fallback_the_report_names_the_local_engine_and_when(monkeypatch):
    url = "grpc://127.0.0.1:8001"
    rep = RenderReport(output_path=None, sidecar_path=None, face_solver="geometric solver",
                       speech_backend=f"speech2face.onnx on remote {url}")
    clock = _FrameClock(None)
    clock.marks = [(0, 0), (1_000, 10), (2_000, 20), (3_000, 30)]
    away = SwitchEvent(to="local", t_ns=2_500, wall_s=0.0, reason="server not answering", model="speech2face")
    text = finished_locally(rep, _Runner([away]), clock, 25.0, url)
    assert rep.speech_backend == text and "on remote" not in text.split(";")[0]
    assert text.startswith("speech2face.onnx on ort_cpu (fp32) (local, from ")
    assert "frame 20, 0.80 s into the clip" in text and url in text
    assert rep.face_solver == "geometric solver"
    # the server came back and finished: the report keeps naming it, and says which frames ran locally
    # (new-user trial: 390 of 587 frames ran locally while the summary named only the server)
    back = SwitchEvent(to="remote", t_ns=3_000, wall_s=1.0, reason="answers again", model="speech2face")
    rep2 = RenderReport(output_path=None, sidecar_path=None, speech_backend=f"speech2face.onnx on remote {url}")
    rep2.frames_out = 40
    text2 = finished_locally(rep2, _Runner([away, back]), clock, 25.0, url)
    assert rep2.speech_backend == text2
    assert text2 == (f"speech2face.onnx on remote {url}; the local engine (speech2face.onnx on ort_cpu (fp32)) "
                     "served frames 20-29 (10 of 40)")
    # every frame through the server: nothing added
    rep3 = RenderReport(output_path=None, sidecar_path=None, speech_backend=f"speech2face.onnx on remote {url}")
    assert finished_locally(rep3, _Runner([]), clock, 25.0, url) == ""
    assert rep3.speech_backend == f"speech2face.onnx on remote {url}"
