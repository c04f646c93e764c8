"""trial23: a video corrupted in the middle renders what decodes; non-increasing timestamps are dropped.

The trial overwrote every 50th byte from 60000 to 120000 of grid_s2_swwp2s.mp4: ffmpeg still
decodes most frames, but their timestamps run backwards once (920 ms after 1200 ms), and the
render failed with the tracker's internal "timestamps must strictly increase" and no file name.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from avatar_app import cli
from avatar_app.capture.video_file import VideoFileSource

VIDEO = "video/grid_s2_swwp2s.mp4"


@pytest.fixture
def corrupt_mid(testdata, tmp_path):
    data = bytearray((testdata / VIDEO).read_bytes())
    for i in range(60000, 120000, 50):
        data[i] = 0
    path = tmp_path / "corrupt_mid.mp4"
    path.write_bytes(bytes(data))
    return path


def test_source_drops_frames_whose_time_does_not_increase(corrupt_mid, caplog):
    with VideoFileSource(corrupt_mid) as src:
        times = [f.media_time_s for f in src.frames()]
        assert len(times) > 40
        assert np.all(np.diff(times) > 0), times
        assert src.truncated and src.problem
    warned = [r.getMessage() for r in caplog.records if "timestamp did not increase" in r.getMessage()]
    assert warned and str(corrupt_mid) in warned[0] and "dropped" in warned[0], warned


def test_render_keeps_what_decodes_and_names_the_file(corrupt_mid, tmp_path, capsys):
    out = tmp_path / "cm.mp4"
    rc = cli.main(["render", str(corrupt_mid), "-o", str(out), "--size", "96x64", "-q", "--no-audio"])
    err = capsys.readouterr().err
    assert "strictly increase" not in err, err
    assert str(corrupt_mid) in err and "corrupt" in err, err
    assert rc == 2 and out.is_file() and out.stat().st_size > 0, (rc, err)
    # frames are lost in the middle, not at the end: the line does not say "the first X s"
    m = re.search(r"rendered what could be decoded, \d+\.\d s \((\d+) frames\)", err)
    assert m and "the first" not in err and 0 < int(m[1]) < 75, err
