"""render's messages about its outputs (trial 20 findings 1-3): the sidecar is named with the output's
folder, an output that cannot be created is one line about the output (not the sidecar, not ENOENT),
and a recorder failure reads "cannot create the output", not the window's "recording"."""
from __future__ import annotations

from pathlib import Path

import pytest

from avatar_app import cli
from avatar_app.core.errors import RecordingError
from avatar_app.pipeline import RenderOptions, RenderReport
from avatar_app.pipeline.writer import ClipWriter, sidecar_path_for
from tests.helpers import run_main


def _report(out: str, **kw) -> RenderReport:
    rep = RenderReport(output_path=Path(out), sidecar_path=sidecar_path_for(Path(out)), frames_in=3,
                       frames_out=3, faces_found=3, duration_s=0.12, audio_duration_s=0.12, **kw)
    return rep


@pytest.mark.parametrize("case", ["done", "partial", "interrupted"])
def test_the_sidecar_is_named_with_the_outputs_folder(monkeypatch, capsys, tmp_path, case):
    out = "out/sub/grid.mp4"
    rep = _report(out, input_problem="x.mp4 is truncated" if case == "partial" else "",
                  interrupted=case == "interrupted")
    import avatar_app.pipeline as pipeline

    monkeypatch.setattr(pipeline, "render_file", lambda *a, **k: rep)
    cli.main(["render", str(tmp_path / "in.mp4"), "-o", out, "-q"])
    text = capsys.readouterr()
    said = text.out + text.err
    assert "out/sub/grid.blendshapes.jsonl" in said, said
    assert " grid.blendshapes.jsonl" not in said and "(grid.blendshapes" not in said, said


def test_an_output_where_no_file_can_be_created_is_one_line_about_the_output():
    # /proc takes no new file (ENOENT even for root): the check names the output, not the sidecar
    with pytest.raises(RecordingError) as err:
        ClipWriter(Path("/proc/x.mp4"), RenderOptions(size=(96, 64)), 25.0, None)
    msg = str(err.value)
    assert msg.startswith("cannot create the output /proc/x.mp4: "), msg
    assert "blendshapes" not in msg and "\n" not in msg and "/proc" in msg.split(":", 1)[1], msg


def test_the_cli_exits_4_with_one_line_for_an_uncreatable_output(short_grid_clip):
    r = run_main("render", str(short_grid_clip), "-o", "/proc/x.mp4", "--size", "96x64", "-q")
    assert r.returncode == 4, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot create the output /proc/x.mp4"), r.stderr
    assert "blendshapes" not in r.stderr and "Errno" not in r.stderr, r.stderr


def test_a_recorder_that_cannot_create_its_file_is_reported_as_the_output(monkeypatch, tmp_path):
    import avatar_app.record.recorder as recorder

    real = recorder.os.access
    monkeypatch.setattr(recorder.os, "access", lambda p, m, *a, **k: False if m == recorder.os.W_OK
                        else real(p, m, *a, **k))
    out = tmp_path / "clip.mp4"
    with pytest.raises(RecordingError) as err:
        ClipWriter(out, RenderOptions(size=(96, 64)), 25.0, None)
    msg = str(err.value)
    assert msg.startswith(f"cannot create the output {out}"), msg
    assert "recording" not in msg and ".part" not in msg, msg
    assert not list(tmp_path.iterdir())  # no part file nor probe left behind
