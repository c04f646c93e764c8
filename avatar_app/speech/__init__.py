"""Speech -> mouth blendshapes: the SpeechAnimator contract, voice activity, animators."""
from avatar_app.speech.base import (
    SPEECH_BLENDSHAPES,
    SPEECH_MASK,
    SPEECH_SAMPLE_RATE,
    SpeechAnimator,
    animate_offline,
)
from avatar_app.speech.loudness import LoudnessConfig, LoudnessSpeechAnimator
from avatar_app.speech.vad import GateConfig, VoiceActivityGate

__all__ = [
    "SPEECH_BLENDSHAPES", "SPEECH_MASK", "SPEECH_SAMPLE_RATE", "SpeechAnimator",
    "animate_offline", "LoudnessConfig", "LoudnessSpeechAnimator", "GateConfig",
    "VoiceActivityGate",
]
