"""End-to-end bars of the main job: `avatar-app render` on every test recording.

Renders each recording once (module fixture) through the CLI (its main(), in this process), then checks
durations, the sidecar, blinks and jawOpen against the hand labels and word timings.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import decoded_duration, ffprobe_streams, name_index, read_align, read_track, run_main

VIDEOS = ["grid_s1_bbaf2n.mp4", "grid_s1_bbaf2n.mpg", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4", "openmpf_video_01.mp4"]

pytestmark = [pytest.mark.gl, pytest.mark.slow]


@pytest.fixture(scope="module")
def renders(testdata, tmp_path_factory) -> dict[str, Path]:
    out_dir = tmp_path_factory.mktemp("renders")
    outs = {}
    for name in VIDEOS:
        out = out_dir / (name.replace(".", "_") + ".mp4")
        # (the checks read durations, codecs and the sidecar: the output size is not one of them)
        proc = run_main("render", str(testdata / "video" / name), "-o", str(out), "--size", "96x64", "-q")
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert "Traceback" not in proc.stderr
        outs[name] = out
    return outs


@pytest.mark.parametrize("name", VIDEOS)
def test_output_durations_and_sidecar(renders, testdata, name):
    src = testdata / "video" / name
    out = renders[name]
    s_in, s_out = ffprobe_streams(src), ffprobe_streams(out)
    assert s_out["video"]["codec_name"] in ("h264", "mpeg4")
    assert s_out["audio"]["codec_name"] == "aac"
    num, den = (int(v) for v in s_in["video"]["r_frame_rate"].split("/"))
    frame = den / num
    v_in, v_out = decoded_duration(src, "video"), decoded_duration(out, "video")
    assert abs(v_out - v_in) <= frame + 1e-3, (v_in, v_out)
    a_in, a_out = decoded_duration(src, "audio"), decoded_duration(out, "audio")
    # the audio track ends with the video: a shorter voice is padded with silence, a longer one cut
    assert abs(a_out - v_out) <= 0.050, (v_out, a_in, a_out)
    assert a_out >= min(a_in, v_out) - 0.050, (a_in, a_out)  # none of the voice within the video is lost
    # one sidecar line per input frame
    import av

    with av.open(str(src)) as c:
        n_frames = sum(1 for _ in c.decode(video=0))
    lines = out.with_suffix(".blendshapes.jsonl").read_text().strip().splitlines()
    track = read_track(out.with_suffix(".blendshapes.jsonl"))
    assert len(track.t) == n_frames
    assert track.fps is not None and abs(track.fps - num / den) < 1e-6  # the header names the clip's rate
    assert len(lines) >= n_frames


BLINK_VIDEOS = ["grid_lbax4n", "grid_s1_bbaf2n", "grid_s2_swwp2s"]


def test_blinks_vision_track(renders, testdata, tmp_path):
    labels = json.loads((testdata / "video" / "blinks.json").read_text())
    tp = fp = fn = 0
    report = {}
    for vid in BLINK_VIDEOS:
        track = read_track(renders[vid + ".mp4"].with_suffix(".blendshapes.jsonl"))
        v = track.vision
        left, right = v[:, name_index("eyeBlinkLeft")], v[:, name_index("eyeBlinkRight")]
        n = len(left)
        closed = set()
        for a, b in labels[vid]["closed"]:
            closed.update(range(a, b + 1))
        partial = set(labels[vid]["partial"])
        for f in sorted(closed):
            assert left[f] > 0.5 and right[f] > 0.5, f"{vid} frame {f}: L={left[f]:.2f} R={right[f]:.2f}"
        near = set()
        for f in closed | partial:
            near.update(range(f - 3, f + 4))
        for f in range(n):
            if f not in near:
                assert max(left[f], right[f]) <= 0.5, \
                    f"{vid} frame {f} far from a blink: L={left[f]:.2f} R={right[f]:.2f}"
        pred = (left > 0.5) & (right > 0.5)
        for f in range(n):
            if f in partial:
                continue
            if f in closed:
                tp += int(pred[f])
                fn += int(not pred[f])
            else:
                fp += int(pred[f])
        report[vid] = {"frames": n}
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    print(f"blink frame-level precision {precision:.3f} recall {recall:.3f} (tp {tp} fp {fp} fn {fn})")
    assert recall == 1.0


_JAW_S2_VISION = pytest.mark.xfail(strict=True, reason="not met by the default face path, the learned engine, on "
                                   "grid_s2_swwp2s: jawOpen follows the words at r 0.07, below half the face's own lip "
                                   "gap's 0.16 (the solver: 0.084); that speaker parts his lips in the silence before "
                                   "his first word (models/face_recon.md)")


@pytest.mark.parametrize(("source", "vid"), [
    pytest.param(s, v, marks=_JAW_S2_VISION if (s, v) == ("vision", "grid_s2_swwp2s") else (), id=f"{s}-{v}")
    for s in ("vision", "audio") for v in ("grid_s1_bbaf2n", "grid_s2_swwp2s")])
def test_jaw_open_follows_words(renders, testdata, vid, source):
    track = read_track(renders[vid + ".mp4"].with_suffix(".blendshapes.jsonl"))
    jaw = getattr(track, source)[:, name_index("jawOpen")]
    t = track.t
    words = read_align(testdata / "video" / f"{vid}.align")
    in_word = np.zeros(len(t), bool)
    for a, b, w in words:
        if w != "sil":
            in_word |= (t >= a) & (t < b)
    inside, outside = jaw[in_word].mean(), jaw[~in_word].mean()
    corr = float(np.corrcoef(jaw, in_word.astype(float))[0, 1])
    print(f"{vid} {source}: jawOpen inside words {inside:.3f}, in silences {outside:.3f}, r {corr:.2f}")
    assert inside > outside
    if source == "audio":
        assert inside > outside + 0.02
        return
    # Vision follows the face, not the transcript: grid_s2_swwp2s's speaker holds his lips ~10 mm
    # apart in the silence before his first word. The jaw must follow the words at least half as
    # well as the face's own inner-lip gap does (the evaluation's label-free geometry of the same
    # frames), and at r 0.2 where the face allows it (as tests/reconstruction does for the solver).
    face_corr = _face_lip_gap_corr(testdata / "video" / f"{vid}.mp4", t, in_word)
    assert corr > min(0.2, 0.5 * face_corr), (corr, face_corr)


def _face_lip_gap_corr(video: Path, t: np.ndarray, in_word: np.ndarray) -> float:
    """Pearson r of the face's inner-lip gap (MediaPipe landmarks of the input) with the words."""
    from avatar_app.evaluation import geometry as G
    from avatar_app.evaluation.landmarks import track_video
    from avatar_app.reconstruction import normalise as N

    clip = track_video(video)
    times = clip.times[clip.found]
    head = N.align(clip.points[clip.found], clip.image_size)[0]
    gap = G.shape_features(head)[:, G.SHAPE_FEATURES.index("lip_gap")]
    return float(np.corrcoef(np.interp(t, times, gap), in_word.astype(float))[0, 1])
