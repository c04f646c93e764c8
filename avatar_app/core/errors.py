"""Exception hierarchy: everything the app raises on bad input derives from AvatarError.

The CLI prints ``str(error)`` without a traceback and exits non-zero; the window
shows it in a message and keeps running.
"""
from __future__ import annotations


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


class RecordingError(AvatarError):
    """A recording could not be written (disk full, encoder failure)."""


def error_line(exc: BaseException) -> str:
    """The CLI's one-line form of an error: ``error: <message>``, the message's first letter in lower
    case after the prefix as in the CLI's other lines ("error: video file not found", not "error:
    Video file not found"; new-user trial). A first word in capitals or mixed case (MP4, FFmpeg,
    ONNX) is left as it is.

    Args:
        exc: the error (its ``str()`` is the message).

    Returns:
        The line, without a newline.
    """
    text = str(exc)
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        text = text[0].lower() + text[1:]
    return f"error: {text}"
