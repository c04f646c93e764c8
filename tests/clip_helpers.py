"""Real landmark clips shared by the solver's frozen-copy tests (tests/reconstruction/): the
MediaPipe landmarks and frame times of the first frames of a few real recordings."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from avatar_app.tracking import FaceTracker, RunningMode

CLIPS = (("video/grid_lbax4n.mp4", 75), ("video/grid_s1_bbaf2n.mp4", 75),
         ("video/expressive/lp_d9.mp4", 240))


def track_clips(testdata: Path) -> dict[str, tuple[list, np.ndarray]]:
    """{clip path relative to testdata: (Landmarks list, (N,) float64 frame times in s)} of the first
    frames of each of CLIPS (MediaPipe VIDEO mode).

    Raises:
        AssertionError: a clip lost its face on more than 10 % of those frames.
    """
    out = {}
    with FaceTracker(RunningMode.VIDEO) as tracker:
        for rel, n in CLIPS:
            lms, times = [], []
            with av.open(str(testdata / rel)) as c:
                for k, frame in enumerate(c.decode(video=0)):
                    if k >= n:
                        break
                    lm = tracker.process_video_frame(frame.to_ndarray(format="bgr24"), frame.time * 1e3)
                    if lm is not None:
                        lms.append(lm)
                        times.append(frame.time)
            tracker.reset()
            assert len(lms) > 0.9 * n, f"{rel}: face lost"
            out[rel] = (lms, np.array(times))
    return out


def cached_track_clips(testdata: Path) -> dict[str, tuple[list, np.ndarray]]:
    """What :func:`track_clips` returns, read from the evaluation's landmark cache instead of tracked
    again (avatar_app.evaluation.landmarks.track_video: the whole clip in MediaPipe VIDEO mode with a
    fresh tracker, keyed by the file's hash and MediaPipe's version). VIDEO-mode tracking is causal,
    so its first frames are the landmarks :func:`track_clips` finds (equal to the last bit when checked).

    Raises:
        AssertionError: a clip lost its face on more than 10 % of those frames.
    """
    from avatar_app.evaluation.landmarks import track_video

    out = {}
    for rel, n in CLIPS:
        clip = track_video(testdata / rel)
        idx = [i for i in range(min(n, len(clip))) if clip.found[i]]
        assert len(idx) > 0.9 * n, f"{rel}: face lost"
        out[rel] = ([clip.landmarks(i) for i in idx], clip.times[idx])
    return out


def remux(src: Path, dst: Path, format_name: str) -> Path:
    """``src``'s packets into a ``format_name`` container ``dst`` (PyAV, no re-encoding)."""
    import av

    with av.open(str(src)) as c, av.open(str(dst), "w", format=format_name) as out:
        streams = {s.index: out.add_stream_from_template(s) for s in c.streams}
        for pkt in c.demux():
            if pkt.dts is not None:
                pkt.stream = streams[pkt.stream.index]
                out.mux(pkt)
    return dst
