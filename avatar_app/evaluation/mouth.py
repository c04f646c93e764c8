"""Mouth from vision and voice: does fusion keep what the camera sees?

For a clip with an audio track, the face path's weights (vision) and the
speech engine's weights of the same frames (voice, offline look-ahead as in a
render) are fused by :func:`avatar_app.fusion.fuse_mouth` (no smoothing, so
the comparison is of the fusion rule alone). Each is put through the face
model and its inner-lip gap is correlated with the lip gap the camera sees
(:mod:`avatar_app.evaluation.geometry`). Fusion must never fall below vision
alone: it may add what vision misses, never take away what it sees.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from avatar_app.evaluation import geometry as G
from avatar_app.evaluation.fidelity import pearson

SPEECH_RATE = 16000


def speech_weights(video: Path, times: np.ndarray, speech=None) -> np.ndarray | None:
    """(F, 52) speech-engine weights at the frame times, or None when the clip has no audible track.

    Args:
        video: the clip (its first audio stream is used).
        times: (F,) frame times, seconds.
        speech: a SpeechAnimator (default: the shipped speech engine or its fallback).
    """
    import av

    from avatar_app.capture.audio_file import load_audio
    from avatar_app.core.errors import InputError

    try:
        audio = load_audio(video, sample_rate=SPEECH_RATE)
    except (InputError, av.FFmpegError):
        return None
    if audio.samples.size == 0 or float(np.abs(audio.samples).max()) < 10 ** (-70 / 20):
        return None
    if speech is None:
        from avatar_app.pipeline.stages import StageChoice, build_speech

        speech = build_speech(StageChoice())
    if hasattr(speech, "reset"):
        speech.reset()
    look = float(getattr(speech, "offline_lookahead_s", 0.0) or 0.0)
    n_ctx = round(float(getattr(speech, "context_s", 0.1)) * SPEECH_RATE)
    s = audio.samples
    out = np.zeros((len(times), 52), np.float32)
    for i, t in enumerate(times):
        end = round((t - audio.media_time_s + look) * SPEECH_RATE)
        win = np.zeros(n_ctx, np.float32)
        lo, hi = max(end - n_ctx, 0), min(end, len(s))
        if hi > lo:
            win[lo - (end - n_ctx): hi - (end - n_ctx)] = s[lo:hi]
        out[i] = speech.process(win, float(t) + look)
    return out


def fusion_scores(inp: np.ndarray, vision: np.ndarray, audio: np.ndarray, found: np.ndarray,
                  settings=None) -> dict:
    """Lip-gap correlation of vision alone and of the fused mouth with the visible lip gap.

    Args:
        inp: (F, len(FEATURES)) input geometry.
        vision: (F, 52) face-path weights.
        audio: (F, 52) speech weights.
        found: (F,) bool, vision saw the face.
        settings: FusionSettings (default ones).

    Returns:
        ``{"vision_r", "fused_r", "audio_r"}``.
    """
    from avatar_app.avatar.face_model import load_face_model
    from avatar_app.fusion import FusionSettings, fuse_mouth

    settings = settings or FusionSettings()
    fused = np.array([fuse_mouth(v, a, bool(f), settings) for v, a, f in zip(vision, audio, found)])
    model = load_face_model()
    j = G.SHAPE_FEATURES.index("lip_gap")
    ok = found & np.isfinite(inp[:, j])

    def gap(w):
        return G.shape_features(model.evaluate(w[ok].astype(np.float32)))[:, j]

    x = inp[ok, j]
    return {"vision_r": pearson(x, gap(vision)), "fused_r": pearson(x, gap(fused)), "audio_r": pearson(x, gap(audio))}
