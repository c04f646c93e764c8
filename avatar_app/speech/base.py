"""The speech-animator contract: audio up to a video frame's time -> mouth blendshapes.

A :class:`SpeechAnimator` is called once per video frame (about 25-60 Hz) with
the mono 16 kHz audio that ENDS at that frame's time. It is causal (it never
sees audio after the frame time) and stateful (smoothing, voice gate), so one
instance serves one audio stream; call :meth:`SpeechAnimator.reset` between
streams.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import InputError

#: Sample rate every speech animator takes, Hz (DESIGN.md: 16 kHz mono float32).
SPEECH_SAMPLE_RATE = 16000

#: Blendshapes a speech animator may set (jaw, mouth, cheek and tongue shapes).
SPEECH_BLENDSHAPES: tuple[str, ...] = tuple(
    n for n in BLENDSHAPE_NAMES if n.startswith(("jaw", "mouth", "cheek", "tongue"))
)

#: (52,) bool, True where a speech animator may output a non-zero weight.
SPEECH_MASK: np.ndarray = np.array([n in SPEECH_BLENDSHAPES for n in BLENDSHAPE_NAMES])


@runtime_checkable
class SpeechAnimator(Protocol):
    """Turns the audio before a video frame into mouth blendshape weights.

    Attributes:
        sample_rate: input sample rate in Hz (always 16000).
        context_s: seconds of audio the animator wants before the frame time;
            callers pass at least this much when they have it (less at the very
            start of a stream is fine).

    Thread: not thread-safe; one instance per audio stream, called from one thread.
    """

    sample_rate: int
    context_s: float

    def reset(self) -> None:
        """Forget all state (smoothing, noise floor, gate) before a new stream."""
        ...

    def process(self, window: np.ndarray, t_s: float) -> np.ndarray:
        """Weights for the video frame at ``t_s``.

        Args:
            window: (N,) float32 mono audio at :attr:`sample_rate` in [-1, 1]
                whose LAST sample is at ``t_s`` (no look-ahead). N may be
                smaller than ``context_s * sample_rate`` at a stream's start.
            t_s: the frame's time in seconds on the audio's clock (media time
                or seconds since the stream started); non-decreasing between
                calls (a jump back is treated as a new stream).

        Returns:
            (52,) float32 ARKit weights in [0, 1] (core.blendshapes order),
            zero outside :data:`SPEECH_BLENDSHAPES`. A new array each call.

        Raises:
            InputError: ``window`` is not 1-D or holds non-finite values, or
                ``t_s`` is not finite.
        """
        ...


def check_window(window: np.ndarray, t_s: float) -> np.ndarray:
    """Validate a :meth:`SpeechAnimator.process` input and return it as float32.

    Args:
        window: (N,) audio samples, any real dtype.
        t_s: frame time in seconds.

    Returns:
        (N,) float32 view or copy of ``window``.

    Raises:
        InputError: wrong shape, non-finite samples or a non-finite time.
    """
    x = np.asarray(window)
    if x.ndim != 1:
        raise InputError(
            f"speech audio window must be mono, shape (N,); got shape {x.shape}"
        )
    if not np.isfinite(t_s):
        raise InputError(f"speech frame time must be finite seconds; got {t_s!r}")
    x = x.astype(np.float32, copy=False)
    if x.size and not np.isfinite(x).all():
        raise InputError("speech audio window contains NaN or infinite samples")
    return x


def animate_offline(
    animator: SpeechAnimator, samples: np.ndarray, fps: float, n_frames: int | None = None
) -> np.ndarray:
    """Run an animator over a whole mono track, as the offline pipeline does.

    Frame ``i`` is at ``t = i / fps``; its window holds the
    ``animator.context_s`` seconds of audio that end at ``t`` (shorter at the
    start). An animator with an ``offline_lookahead_s`` attribute L > 0 is
    called as if the frame were at ``t + L`` (its window ends L after the
    frame; zeros after the track's end), so offline rendering can use more
    look-ahead than live mode. The animator is reset first, so the result is
    deterministic.

    Args:
        animator: any :class:`SpeechAnimator`.
        samples: (N,) float32 mono audio at ``animator.sample_rate``.
        fps: video frame rate, Hz (> 0).
        n_frames: number of frames; default covers the track
            (``floor(N / sr * fps) + 1``).

    Returns:
        (n_frames, 52) float32 weights.

    Raises:
        InputError: ``fps`` is not positive or ``samples`` is not mono.
    """
    if not fps > 0:
        raise InputError(f"fps must be positive; got {fps!r}")
    x = check_window(samples, 0.0)
    sr = animator.sample_rate
    if n_frames is None:
        n_frames = int(np.floor(len(x) / sr * fps)) + 1
    ctx = int(round(animator.context_s * sr))
    need = int(round((n_frames - 1) / fps * sr))
    if need > len(x):  # frames after the track's end hear silence
        x = np.concatenate([x, np.zeros(need - len(x), np.float32)])
    lead = float(getattr(animator, "offline_lookahead_s", 0.0))
    if lead > 0:  # offline: the animator may hear up to ``lead`` past each frame time
        x = np.concatenate([x, np.zeros(int(round(lead * sr)) + 1, np.float32)])
    animator.reset()
    out = np.zeros((n_frames, NUM_BLENDSHAPES), np.float32)
    for i in range(n_frames):
        t = i / fps + lead
        end = int(round(t * sr))
        out[i] = animator.process(x[max(0, end - ctx):end], t)
    return out


def describe_speech(animator: object | None) -> str:
    """What drives the mouth from the voice, for reports: the animator's ``describe()``, else its class name.

    Args:
        animator: a SpeechAnimator, or None (no audio drives the mouth).

    Returns:
        e.g. ``"speech2face.onnx on ort_cpu (fp32)"``, ``"loudness solver"``; "" for None.
    """
    if animator is None:
        return ""
    describe = getattr(animator, "describe", None)
    return describe() if callable(describe) else type(animator).__name__

