"""`render --settings` runs the studio's Tracking choice (issue 19 item 3); an explicit --tracker wins, and a
tracker value the file should not hold is named and replaced by its default."""
from __future__ import annotations

import json


from avatar_app.pipeline.settings import StudioSettings, save_settings_file
from tests.helpers import run_main


def _settings_file(tmp_path, **tracker):
    s = StudioSettings()
    s.engines.tracker = {"kind": "onnx", "backend": "ort_cpu", "precision": "fp32"}
    path = save_settings_file(tmp_path / "studio.json", s)
    if tracker:
        data = json.loads(path.read_text())
        data["engines"]["tracker"].update(tracker)
        path.write_text(json.dumps(data))
    return path


def _render(clip, tmp_path, *extra):
    return run_main("render", str(clip), "-o", str(tmp_path / "o.mp4"), "--size", "96x64", "-q", *extra)


def test_the_settings_files_onnx_tracker_renders(short_grid_clip, tmp_path, monkeypatch):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    r = _render(short_grid_clip, tmp_path, "--settings", str(_settings_file(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert "tracked by ONNX tracker: face_detection.onnx on ort_cpu (fp32)" in r.stdout, r.stdout
    assert "face_landmark.onnx on ort_cpu (fp32)" in r.stdout, r.stdout


def test_an_explicit_tracker_wins_over_the_settings_file(short_grid_clip, tmp_path, monkeypatch):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    r = _render(short_grid_clip, tmp_path, "--settings", str(_settings_file(tmp_path)), "--tracker", "mediapipe")
    assert r.returncode == 0, r.stderr
    assert "tracked by MediaPipe face mesh" in r.stdout, r.stdout


def test_a_bad_tracker_in_the_settings_file_is_named(short_grid_clip, tmp_path, monkeypatch):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    bad = _settings_file(tmp_path, kind="openface", precision="fp4")
    r = _render(short_grid_clip, tmp_path, "--settings", str(bad))
    assert r.returncode == 0, r.stderr
    assert "engines.tracker.kind: 'openface' is not one of auto, mediapipe, onnx; using 'auto'" in r.stderr, r.stderr
    named = "engines.tracker.precision: 'fp4' is not one of null, fp32, fp16, int8; using the backend's default"
    assert named in r.stderr, r.stderr
    assert "tracked by MediaPipe face mesh" in r.stdout, r.stdout  # Auto on this CPU
