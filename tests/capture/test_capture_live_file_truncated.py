"""A damaged file played live says so (second new-user trial): it loops what decodes, with a notice."""
import time

import pytest

from avatar_app.capture.live_file import LiveFileSource
from avatar_app.core.errors import AvatarError


def _wait_for(cond, seconds=30.0):
    end = time.monotonic() + seconds  # a hang guard, not a timing claim
    while not cond() and time.monotonic() < end:
        time.sleep(0.05)
    return cond()


def test_a_truncated_file_gets_a_notice_naming_what_decoded(tmp_path, testdata):
    src = (testdata / "video" / "grid_s1_bbaf2n.mp4").read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(src[:60000])
    try:
        s = LiveFileSource(cut, loop=True)
    except AvatarError:
        pytest.fail("the damaged file should open (it has frames that decode)")
    with s:
        s.start()
        assert _wait_for(lambda: s.notice is not None), "no notice after the first pass"
    assert "cut.mp4" in s.notice and "could be decoded" in s.notice and "of about 75 frames" in s.notice


def test_a_whole_file_gets_no_notice(short_grid_clip):
    """A complete file plays to its end without a notice: a 0.4 s cut of grid_s1_bbaf2n.mp4 re-encoded
    whole (conftest's ``short_grid_clip``), since whether a notice comes does not depend on the length
    and the 3 s clip takes 3 s to play in real time."""
    with LiveFileSource(short_grid_clip, loop=False) as s:
        s.start()
        assert _wait_for(lambda: s.finished or s.error is not None, 60.0)
    assert s.error is None and s.notice is None


def test_a_truncated_file_looping_warns_once(tmp_path, testdata, caplog):
    """Trial 20: the studio logged the same truncation warning 4-6 times (once per loop). The file is
    cut at 40000 bytes (7 frames decode, 0.3 s a loop; 60000 bytes: 14 frames), so three loops play
    in about 1 s: the warning's count does not depend on a loop's length."""
    import logging

    src = (testdata / "video" / "grid_s1_bbaf2n.mp4").read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(src[:40000])
    caplog.set_level(logging.DEBUG, logger="avatar_app")
    with LiveFileSource(cut, loop=True) as s:
        s.start()
        assert _wait_for(lambda: s.notice is not None)
        decoded = int(s.notice.split()[1])  # "only N of about M frames ..."
        last = []

        def looped():
            f = s.get_latest(0.05)
            if f is not None:
                last.append(f.index)
            return bool(last) and last[-1] >= 3 * decoded + 1  # the file played 3 times and more

        assert _wait_for(looped, 60.0)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "cut.mp4" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]


def test_a_cut_matroska_gets_a_notice_too(tmp_path, testdata):
    """A cut .mkv decodes about as many frames as its cut length implies (no frame-count shortfall); the
    decoder's finding (an earlier end than its track's DURATION tag) is the notice (second trial, 9th session)."""
    from tests.clip_helpers import remux

    whole = remux(testdata / "video" / "grid_s1_bbaf2n.mp4", tmp_path / "whole.mkv", "matroska")
    cut = tmp_path / "cut.mkv"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with LiveFileSource(cut, loop=False) as s:
        s.start()
        assert _wait_for(lambda: s.notice is not None), "no notice after the first pass"
    assert "cut.mkv" in s.notice and "damaged or cut short" in s.notice and "frames end at" in s.notice, s.notice
