"""Real-speech evaluation of speech animators (used by tests/speech/test_speech_real.py and the model card).

- jawOpen agreement: audio-only jawOpen vs vision-only jawOpen (MediaPipe
  tracking + the geometric solver) on the GRID talkers, Pearson correlation per
  clip at the video frame times from the first word's start (the clip's GRID
  ``.align``): before any sound the voice cannot know the mouth, and grid_s2's
  speaker holds his lips ~10 mm apart in that silence, which vision shows
  (``jaw_corr_whole_clip`` keeps the figure over every frame: 0.62 / 0.44 for
  the engine, 0.84 / 0.79 from the first word);
- lip shapes on the pocketsphinx phone alignments (real_alignments.json): the
  share of /p b m/ frames with closed lips and of /uw uh w/ frames with rounded
  lips, per animator, at 100 frames/s.

Definitions (ARKit): lips closed when ``jawOpen - mouthClose <= 0.06`` (mouthClose
closes the lips against the open jaw) or ``jawOpen <= 0.1`` with ``mouthPress >= 0.1``;
rounded when ``max(mouthFunnel, mouthPucker) >= 0.2``.

Usage::

    python -m training.speech.evaluate_real --testdata ../shared/testdata
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.speech.base import animate_offline

log = logging.getLogger("evaluate_real")
ALIGNMENTS = Path(__file__).with_name("real_alignments.json")
_I = {n: i for i, n in enumerate(BLENDSHAPE_NAMES)}
CLOSED_PHONES = ("P", "B", "M")
ROUND_PHONES = ("UW", "UH", "W")
GRID = ("grid_s1_bbaf2n", "grid_s2_swwp2s")


def load_16k(path: Path) -> np.ndarray:
    """Decode any audio file to (N,) float32 mono 16 kHz with PyAV."""
    import av

    out = []
    with av.open(str(path)) as c:
        rs = av.AudioResampler(format="flt", layout="mono", rate=16000)
        for f in c.decode(audio=0):
            out += [g.to_ndarray().reshape(-1) for g in rs.resample(f)]
        out += [g.to_ndarray().reshape(-1) for g in rs.resample(None)]
    return np.concatenate(out).astype(np.float32)


def vision_jaw(video_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Vision-only jawOpen per video frame: (t_s (N,), jaw (N,)); NaN where no face."""
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.tracking.face_mesh import FaceTracker, RunningMode

    ts, jaw = [], []
    solver = GeometricSolver()
    with VideoFileSource(video_path) as src, FaceTracker(RunningMode.VIDEO) as tracker:
        for frame in src.frames():
            lm = tracker.process_video_frame(frame.image, frame.media_time_s * 1000.0)
            ts.append(frame.media_time_s)
            if lm is None:
                jaw.append(np.nan)
            else:
                jaw.append(float(solver.reconstruct(lm, frame.media_time_s).blendshapes[_I["jawOpen"]]))
    return np.array(ts), np.array(jaw)


def audio_weights_at(animator, samples: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """(N, 52) weights of ``animator`` at the given times (a uniform frame grid from 0)."""
    fps = 1.0 / float(np.median(np.diff(times_s))) if len(times_s) > 1 else 25.0
    w = animate_offline(animator, samples, fps, int(round(times_s[-1] * fps)) + 1)
    idx = np.clip(np.round(times_s * fps).astype(int), 0, len(w) - 1)
    return w[idx]


def from_first_word(align_path: Path, times_s: np.ndarray) -> np.ndarray:
    """(N,) bool: frames from the first one inside a spoken word (a GRID ``.align`` file) on."""
    from avatar_app.evaluation.events import words_indicator

    words = words_indicator(align_path, times_s)
    return np.arange(len(times_s)) >= (int(np.argmax(words)) if words.any() else len(times_s))


def jaw_correlation(audio_jaw: np.ndarray, vis_jaw: np.ndarray) -> float:
    """Pearson correlation over frames where vision saw the face."""
    ok = np.isfinite(vis_jaw)
    return float(np.corrcoef(audio_jaw[ok], vis_jaw[ok])[0, 1])


def closed(w: np.ndarray) -> np.ndarray:
    """(N,) bool: lips closed (see module docstring)."""
    jaw, close = w[:, _I["jawOpen"]], w[:, _I["mouthClose"]]
    press = 0.5 * (w[:, _I["mouthPressLeft"]] + w[:, _I["mouthPressRight"]])
    return (jaw - close <= 0.06) | ((jaw <= 0.1) & (press >= 0.1))


def rounded(w: np.ndarray) -> np.ndarray:
    """(N,) bool: lips rounded (see module docstring)."""
    return np.maximum(w[:, _I["mouthFunnel"]], w[:, _I["mouthPucker"]]) >= 0.2


def phone_mask(times_s: np.ndarray, phones: list, wanted: tuple[str, ...]) -> np.ndarray:
    """(N,) bool: frame time inside a phone of ``wanted``."""
    m = np.zeros(len(times_s), bool)
    for a, b, p in phones:
        if p.upper().rstrip("012") in wanted:
            m |= (times_s >= a) & (times_s < b)
    return m


def lip_rates(animator, samples: np.ndarray, phones: list) -> dict:
    """Closed-on-/p b m/ and rounded-on-/uw uh w/ shares at 100 frames/s."""
    t = np.arange(int(len(samples) / 160) + 1) / 100.0
    w = animate_offline(animator, samples, 100.0, len(t))
    pbm, uw = phone_mask(t, phones, CLOSED_PHONES), phone_mask(t, phones, ROUND_PHONES)
    return {"closed_on_pbm": float(closed(w)[pbm].mean()) if pbm.any() else float("nan"),
            "rounded_on_uw": float(rounded(w)[uw].mean()) if uw.any() else float("nan"),
            "pbm_frames": int(pbm.sum()), "uw_frames": int(uw.sum())}


def evaluate(testdata: Path, animators: dict) -> dict:
    """All real-speech figures for ``animators`` (name -> SpeechAnimator)."""
    al = json.loads(ALIGNMENTS.read_text())["clips"]
    out: dict = {"jaw_corr": {}, "jaw_corr_whole_clip": {}, "lips": {}}
    for clip in GRID:
        t, vj = vision_jaw(testdata / "video" / f"{clip}.mp4")
        x = load_16k(testdata / "audio" / f"{clip}.wav")
        spoken = from_first_word(testdata / "video" / f"{clip}.align", t)
        aj = {n: audio_weights_at(a, x, t)[:, _I["jawOpen"]] for n, a in animators.items()}
        out["jaw_corr"][clip] = {n: jaw_correlation(j[spoken], vj[spoken]) for n, j in aj.items()}
        out["jaw_corr_whole_clip"][clip] = {n: jaw_correlation(j, vj) for n, j in aj.items()}
    for clip, c in al.items():
        x = load_16k(testdata / c["audio"])
        out["lips"][clip] = {n: lip_rates(a, x, c["phones"]) for n, a in animators.items()}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--testdata", type=Path, default=Path("../shared/testdata"))
    ap.add_argument("--model", type=Path, default=Path("models/speech2face.onnx"))
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    from avatar_app.inference import EngineManager
    from avatar_app.speech.engine_animator import EngineSpeechAnimator
    from avatar_app.speech.loudness import LoudnessSpeechAnimator

    anims = {"engine": EngineSpeechAnimator(a.model, manager=EngineManager(isolate=False)),
             "loudness": LoudnessSpeechAnimator()}
    print(json.dumps(evaluate(a.testdata, anims), indent=1))


if __name__ == "__main__":
    main()
