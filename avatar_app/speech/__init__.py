"""Speech -> mouth blendshapes: the SpeechAnimator contract, voice activity, animators.

Animators: :class:`EngineSpeechAnimator` (the learned speech2face engine, the
default when ``models/speech2face.onnx`` loads; :func:`avatar_app.pipeline.stages.build_stages`
picks it) and :class:`LoudnessSpeechAnimator` (the fallback and baseline).
Features: :func:`log_mel` / :class:`StreamingLogMel` (64-band log-mel, 16 kHz,
25 ms window, 10 ms hop), shared by training and runtime.
"""
from avatar_app.speech.base import (
    SPEECH_BLENDSHAPES,
    SPEECH_MASK,
    SPEECH_SAMPLE_RATE,
    SpeechAnimator,
    animate_offline,
)
from avatar_app.speech.engine_animator import EngineSpeechAnimator, infer_features
from avatar_app.speech.loudness import LoudnessConfig, LoudnessSpeechAnimator
from avatar_app.speech.mel import N_MELS, StreamingLogMel, log_mel
from avatar_app.speech.vad import GateConfig, VoiceActivityGate
from avatar_app.speech.visemes import HAND_TABLE, VISEMES, derive_viseme_table

__all__ = [
    "SPEECH_BLENDSHAPES", "SPEECH_MASK", "SPEECH_SAMPLE_RATE", "SpeechAnimator",
    "animate_offline", "EngineSpeechAnimator", "infer_features",
    "LoudnessConfig", "LoudnessSpeechAnimator", "N_MELS", "StreamingLogMel", "log_mel",
    "GateConfig", "VoiceActivityGate", "HAND_TABLE", "VISEMES", "derive_viseme_table",
]
