"""Exception hierarchy: everything the app raises on bad input derives from AvatarError.

The CLI prints ``str(error)`` without a traceback and exits non-zero; the window
shows it in a message and keeps running.
"""
from __future__ import annotations

import re


class AvatarError(Exception):
    """Base of all avatar_app errors. ``str(err)`` is a message for the user."""


class InputError(AvatarError):
    """A file or argument the user gave cannot be used (missing, corrupt, wrong kind)."""

    def __init__(self, message: str, path: object | None = None):
        super().__init__(message)
        self.path = path


class CaptureError(AvatarError):
    """A camera or microphone cannot be opened or stopped delivering."""

    def __init__(self, message: str, device: object | None = None):
        super().__init__(message)
        self.device = device


class TrackingError(AvatarError):
    """Misuse of the face tracker (e.g. timestamps not strictly increasing)."""


class NoFaceError(AvatarError):
    """No face was found where one is required (e.g. in a whole video)."""


class ModelLoadError(AvatarError):
    """A model file or engine cannot be loaded."""


class BackendUnavailableError(AvatarError):
    """An inference backend is not installed or cannot run here."""


class EngineBuildError(AvatarError):
    """An engine failed to build or to pass verification."""


class VerificationUnavailableError(EngineBuildError):
    """A reduced precision cannot be verified on this machine (its real validation set is not
    installed), so no engine of it is built: the machine's limit, not a failed build
    (``engines build`` exits 2, as for an unavailable backend)."""


class RecordingError(AvatarError):
    """A recording could not be written (disk full, encoder failure)."""


def error_line(exc: BaseException) -> str:
    """The CLI's one-line form of an error: ``error: <message>``, the message's first letter in lower
    case after the prefix as in the CLI's other lines ("error: video file not found", not "error:
    Video file not found"; new-user trial). A first word with more capitals (MP4, FFmpeg, TensorRT,
    MediaPipe, class names) or a proper name (:data:`PROPER_NAMES`) is left as it is.

    Args:
        exc: the error (its ``str()`` is the message).

    Returns:
        The line, without a newline.
    """
    text = str(exc)
    first = re.match(r"[A-Z](?:[a-z]+\b| )", text)  # a word, or a one-letter word before more text
    if first and first.group() not in PROPER_NAMES:
        text = text[0].lower() + text[1:]
    return f"error: {text}"


#: First words :func:`error_line` keeps capitalised (names that begin messages).
PROPER_NAMES = frozenset({"Triton", "London", "Python", "Linux", "Windows", "Mesa", "Qt"})
