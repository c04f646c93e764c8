"""What the studio session tells its views: the events it emits and what opening a source gave."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from avatar_app.core.events import Event


def sentence(text: str) -> str:
    """``text`` stripped, ending with a full stop (unless it ends with . ! ? or …)."""
    text = text.strip()
    return text + "." if text and text[-1] not in ".!?…" else text


@dataclass
class SourceInfo:
    """What opening a source gave (built on the opener thread).

    Attributes:
        pipeline: the started LivePipeline, or None on error.
        mic: the started MicSource, or None.
        label: what the source is, for the user ("Camera 0: 1280x720 @ 30 fps granted").
        mic_text: what the microphone is ("" when unchanged).
        error: why it failed, as the user should read it ("" when it worked).
        kind: "camera", "file" or "".
        camera_id: the camera's stable device id.
        path: the video file, or None.
        reconnect: a reconnect of the lost camera.
    """

    pipeline: object = None
    mic: object = None
    label: str = ""
    mic_text: str = ""
    error: str = ""
    kind: str = ""
    camera_id: str = ""
    path: Path | None = None
    reconnect: bool = False


class SessionEvents:
    """The session's events (callbacks receive the arguments named).

    Attributes:
        source_opening(text): a source is being opened on the opener thread.
        source_changed(info): a new source runs (:class:`SourceInfo`).
        source_failed(info, replaced): a source did not open; ``replaced`` is False when
            the current source keeps running.
        source_lost(message, camera): the running source stopped (a camera is looked for again).
        mic_changed(text): what the microphone is now.
        state(state): a new AvatarState (pipeline thread).
        engine_changed(name): an engine's slot, build or error changed (``"tracker"``: the face
            tracker's choice, build or error, :class:`~avatar_app.pipeline.stage_swaps.TrackerController`).
        statuses_ready(): the backend probe finished.
        neutral_calibrated(): the neutral face was taken.
        status(text, ms): a short message for the status bar.
        error(text): something failed that the user should know about.
        output_status(kind, text): "vmc" or "vcam" changed.
        avatar_loaded(path, mesh_or_error): an avatar file was loaded (or failed).
        settings_changed(area): an area was applied ("avatar", "output", "tuning", ...).
    """

    def __init__(self):
        for name in ("source_opening", "source_changed", "source_failed", "source_lost", "mic_changed", "state",
                     "engine_changed", "statuses_ready", "neutral_calibrated", "status", "error", "output_status",
                     "avatar_loaded", "settings_changed"):
            setattr(self, name, Event(name))
