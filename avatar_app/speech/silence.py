"""A silent audio track is no reason to refuse a render: the face drives the mouth.

Screen recorders often write a digitally silent track. The render then runs
without the speech engine (vision alone drives the mouth), keeps the silent
track in the output so its length matches the input, and tells the user why
the voice did nothing.
"""
from __future__ import annotations

import numpy as np

#: Peak level below which a track counts as silent, linear (-70 dBFS: digital silence or near it).
SILENT_PEAK = 10 ** (-70 / 20)


def is_silent(samples: np.ndarray, threshold: float = SILENT_PEAK) -> bool:
    """True when the peak level of ``samples`` ((N,) float in [-1, 1]) is below ``threshold``."""
    s = np.asarray(samples)
    return s.size == 0 or float(np.max(np.abs(s))) < threshold


def silent_track_warning(what: str) -> str:
    """The user's warning for a silent track (``what`` names it, e.g. "audio track of clip.mp4")."""
    return (f"the {what} is silent: the mouth follows the video alone "
            "(add a voice with --audio FILE, or --no-audio to drop the track)")


def drop_silent_speech(samples: np.ndarray | None, what: str, warnings: list[str]) -> bool:
    """Whether the speech engine must not run on this track; appends the warning when so.

    Args:
        samples: the track's samples at any rate, or None when there is no track.
        what: the track's name for the message.
        warnings: the render report's warnings (appended to).

    Returns:
        True for a silent track (drive the mouth from vision alone), False otherwise.
    """
    if samples is None or not is_silent(samples):
        return False
    warnings.append(silent_track_warning(what))
    return True
