"""`render --face {default,solver,engine}`: the face path goes through the stage factory explicitly (issue 17),
``default`` follows FACE_ENGINE_BY_DEFAULT, the summary says which path drove the avatar, and a model that
cannot load leaves the solver driving it with the reason (exit 0)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app import cli
from avatar_app.pipeline import stages


def _render(capsys, clip, out, *extra) -> tuple[int, str, str, np.ndarray]:
    """Run ``render`` in this process; (exit status, stdout, stderr, the sidecar's (N, 52) blendshapes)."""
    from avatar_app.record.sidecar import read_sidecar

    capsys.readouterr()
    rc = cli.main(["render", str(clip), "-o", str(out), "--size", "96x64", "-q", "--no-audio", *extra])
    captured = capsys.readouterr()
    track = read_sidecar(out.with_suffix(".blendshapes.jsonl")) if rc == 0 else None
    return rc, captured.out, captured.err, (track.blendshapes if track is not None else None)


def _face_line(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("face path: ")]
    assert len(lines) == 1, stdout
    return lines[0][len("face path: "):]


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))


def test_engine_differs_from_solver_and_says_so(capsys, short_grid_clip, tmp_path, cache):
    rc, out_s, err_s, solver = _render(capsys, short_grid_clip, tmp_path / "s.mp4", "--face", "solver")
    assert rc == 0, err_s
    assert _face_line(out_s) == "geometric solver (chosen)"
    assert "; geometric solver); " in out_s  # the summary's face stage

    rc, out_e, err_e, engine = _render(capsys, short_grid_clip, tmp_path / "e.mp4", "--face", "engine")
    assert rc == 0, err_e
    assert _face_line(out_e) == "learned face engine"
    assert "face_recon.onnx on " in out_e and "learned face engine" not in err_e  # no fallback warning
    assert solver.shape == engine.shape and len(solver) > 0
    assert float(np.abs(solver - engine).max()) > 0.02  # another path really drove the face


@pytest.mark.parametrize("by_default", [False, True])
def test_default_follows_face_engine_by_default(capsys, short_grid_clip, tmp_path, cache, monkeypatch, by_default):
    monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", by_default)
    explicit = "engine" if by_default else "solver"
    rc, out_d, err, default = _render(capsys, short_grid_clip, tmp_path / "d.mp4")  # no --face: the default
    assert rc == 0, err
    line = _face_line(out_d)
    if by_default:
        assert line == "learned face engine (the default)"
    else:
        assert line.startswith("geometric solver (the default: ") and "--face engine" in line, line
    rc, out_x, err, chosen = _render(capsys, short_grid_clip, tmp_path / "x.mp4", "--face", explicit)
    assert rc == 0, err
    assert np.array_equal(default, chosen)  # the same path, the same avatar
    rc, out_dd, err, _ = _render(capsys, short_grid_clip, tmp_path / "dd.mp4", "--face", "default")
    assert rc == 0 and _face_line(out_dd) == line


def test_a_corrupt_model_falls_back_to_the_solver_with_the_reason(capsys, short_grid_clip, tmp_path, cache,
                                                                 monkeypatch):
    from avatar_app.reconstruction import engine as eng

    bad = tmp_path / "models" / "face_recon.onnx"
    bad.parent.mkdir()
    bad.write_bytes(b"not an onnx file" * 64)
    rc, _, err, solver = _render(capsys, short_grid_clip, tmp_path / "s.mp4", "--face", "solver")
    assert rc == 0, err
    monkeypatch.setattr(eng, "default_model_path", lambda: bad)
    rc, out, err, fallback = _render(capsys, short_grid_clip, tmp_path / "f.mp4", "--face", "engine")
    assert rc == 0, err
    line = _face_line(out)
    assert line.startswith("geometric solver, standing in for the learned face engine: it could not be loaded ("), line
    assert "face_recon.onnx" in line
    assert "warning: the learned face engine cannot be used (" in err, err
    assert np.array_equal(fallback, solver)  # the solver drove the face


def test_the_settings_files_face_path_and_an_explicit_flag(tmp_path, capsys):
    """``--settings`` carries the studio's face path; ``--face`` wins; a bad value is named and is the default."""
    from avatar_app.pipeline.settings import StudioSettings, save_settings_file

    s = StudioSettings()
    s.engines.face = "engine"
    path = save_settings_file(tmp_path / "studio.json", s)

    def options(*extra):
        args = cli.build_parser().parse_args(["render", "in.mp4", "-o", "o.mp4", "--settings", str(path), *extra])
        return cli._render_options(args)

    assert options().face == "engine"
    assert options("--face", "solver").face == "solver"
    assert options("--face", "default").face == "default"
    data = json.loads(path.read_text())
    data["engines"]["face"] = "on"
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert options().face == "default"
    assert "engines.face: 'on' is not one of default, solver, engine; using 'default'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["render", "in.mp4", "-o", "o.mp4", "--face", "learned"])
