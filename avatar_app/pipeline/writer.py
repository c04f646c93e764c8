"""The files of an offline render: the clip and its blendshape sidecar, written to part files first.

:class:`ClipWriter` writes the clip (video frames by media time, the audio muxed
along) and the JSON Lines sidecar to hidden part files beside the targets
(:class:`~avatar_app.record.parts.OutputParts`); the ``settle_*`` functions
rename them over the targets or delete them, so a render that fails leaves
existing files as they were.
"""
from __future__ import annotations

import errno
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from avatar_app.core.errors import AvatarError, InputError, NoFaceError, RecordingError
from avatar_app.core.paths import file_in_the_way
from avatar_app.core.types import AvatarState

if TYPE_CHECKING:
    from avatar_app.pipeline.offline import RenderOptions, RenderReport

#: Suffix of the blendshape sidecar written beside a clip.
SIDECAR_SUFFIX = ".blendshapes.jsonl"


def sidecar_path_for(output_path: Path) -> Path:
    """``clip.mp4`` -> ``clip.blendshapes.jsonl``."""
    return Path(output_path).with_suffix(SIDECAR_SUFFIX)


def unused_clip_path(path: Path) -> Path:
    """``path``, or ``stem-2.suffix``, ``stem-3.suffix``...: the first whose clip and sidecar are both free.

    The studio names recordings by the second they start (``avatar-20261204-203015.mp4``); a second
    recording started within the same second, or in another format with the same stem, must not
    replace the first one's clip or track.

    Args:
        path: the wanted clip path.

    Returns:
        A path whose clip does not exist and whose sidecar name is not taken.
    """
    path = Path(path)
    candidate, n = path, 1
    while candidate.exists() or sidecar_path_for(candidate).exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def sidecar_clash(output_path: Path) -> Path | None:
    """Another clip whose blendshape track writing ``output_path`` would replace, or None.

    ``take.mov`` and ``take.webm`` (or ``take.mp4``) share the sidecar name ``take.blendshapes.jsonl``
    (new-user trial: the second render silently replaced the first clip's track). The track's
    header names its clip (:func:`~avatar_app.record.sidecar.sidecar_owner`); a track written
    before it did belongs to another clip when such a clip lies beside it and ``output_path``
    does not exist yet.

    Args:
        output_path: the clip about to be written.

    Returns:
        The other clip's path (it exists), or None: no track there, the track is this clip's
        own, or its clip is gone.
    """
    from avatar_app.record.formats import KNOWN_FORMATS
    from avatar_app.record.sidecar import sidecar_owner

    output_path = Path(output_path)
    track = sidecar_path_for(output_path)
    if not track.is_file():
        return None
    owner = sidecar_owner(track)
    if owner is not None:
        other = output_path.with_name(owner)
        return other if owner != output_path.name and other.is_file() else None
    if output_path.exists():
        return None
    for suffix in dict.fromkeys(f.suffix for f in KNOWN_FORMATS):
        other = output_path.with_suffix(suffix)
        if other.name != output_path.name and other.is_file():
            return other
    return None


class ClipWriter:
    """Sink of the render thread: encodes frames by time and writes the sidecar.

    The clip and the sidecar are written to hidden part files beside the
    targets (:class:`~avatar_app.record.parts.OutputParts`); :meth:`commit`
    renames them over the targets, :meth:`discard` deletes them, so a render
    that fails leaves existing files as they were.

    The audio given to :meth:`set_audio` is muxed along with the video: before a
    frame shown at ``t`` the audio up to ``t + 1/fps`` goes into the file, so a
    render that stops early (interrupted, or failed) holds as much audio as
    video. :meth:`close` ends the audio track with the video: audio longer than
    the video is cut, shorter audio is padded with silence.
    """

    def __init__(self, output_path: Path, options: RenderOptions, fps: float, audio_rate: int | None):
        from avatar_app.record.factory import open_recorder
        from avatar_app.record.parts import OutputParts
        from avatar_app.record.sidecar import SidecarWriter

        w, h = options.size
        check_output_name(output_path, options)
        _make_output_folder(output_path)
        check_output_creatable(output_path)
        self.output_path = output_path
        from avatar_app.record.formats import recording_format_for

        fmt = recording_format_for(output_path)  # the user's name is checked, not the part file's
        self.parts = OutputParts(output_path, (SIDECAR_SUFFIX,))
        self.recorder = self.sidecar = None
        try:
            self.recorder = open_recorder(self.parts.clip, w, h, fps, audio_sample_rate=audio_rate, fmt=fmt)
            self.sidecar = SidecarWriter(self.parts.part_for(sidecar_path_for(output_path)), fps=float(fps),
                                         clip=output_path.name)
        except AvatarError as exc:
            if self.recorder is not None:
                self.recorder.close()
            self.parts.discard()
            raise self.translate(exc) from exc
        except BaseException:
            if self.recorder is not None:
                self.recorder.close()
            self.parts.discard()
            raise
        self.fps = float(fps)
        self.frames_out = 0
        self.last_time = 0.0
        self._audio: np.ndarray | None = None
        self._audio_t0 = 0.0
        self._audio_fed = 0

    def translate(self, exc: AvatarError) -> AvatarError:
        """An error of the recorder or the sidecar reworded for the targets, not the part files.

        A write failure (disk full ...) says that the existing output was left as it was.
        """
        from avatar_app.record.recorder import RecordingWriteError, io_reason

        if not isinstance(exc, RecordingError):
            return exc
        target = self.output_path
        reason = None
        if isinstance(exc, RecordingWriteError):
            reason = exc.reason
        elif isinstance(exc.__cause__, OSError):
            reason = io_reason(exc.__cause__)
        if reason is not None:
            reason = self.parts.rename_in(str(reason))
            kept = f"; the existing {target.name} was left as it was" if target.exists() else ""
            return RecordingError(f"writing {target} failed: {reason}. Nothing was written{kept}")
        # the recorder speaks the window's words ("cannot create recording X"): render's are "the output"
        message = self.parts.rename_in(str(exc)).replace("cannot create recording ", "cannot create the output ", 1)
        return RecordingError(message)

    def commit(self) -> None:
        """Rename the finished part files over the clip and the sidecar.

        Raises:
            RecordingError: the rename failed (the part files are deleted).
        """
        self.parts.commit()

    def discard(self) -> None:
        """Delete the part files; existing outputs stay as they were. Idempotent."""
        self.parts.discard()

    def set_audio(self, samples: np.ndarray, start_s: float) -> None:
        """Audio to mux with the frames: (N,) float32 at the recorder's rate, first sample at ``start_s`` s."""
        self._audio = np.asarray(samples, np.float32)
        self._audio_t0 = float(start_s)
        self._audio_fed = 0

    def _feed_audio(self, until_s: float) -> None:
        """Write the audio up to media time ``until_s`` (seconds) that is not written yet."""
        if self._audio is None:
            return
        rate = self.recorder.audio_sample_rate
        n = len(self._audio)
        if math.isfinite(until_s):
            n = min(max(int(round((until_s - self._audio_t0) * rate)), 0), n)
        if n > self._audio_fed:
            self.recorder.write_audio(self._audio[self._audio_fed: n], self._audio_t0 + self._audio_fed / rate)
            self._audio_fed = n

    def _pad_audio(self, until_s: float) -> None:
        """Fill the audio track with silence up to media time ``until_s`` (seconds)."""
        rec = self.recorder
        if self._audio is None or rec.time_origin_s is None:
            return
        rate = rec.audio_sample_rate
        missing = int(round((until_s - rec.time_origin_s) * rate)) - rec.audio_samples_written
        if missing > 0:
            rec.write_audio(np.zeros(missing, np.float32), rec.time_origin_s + rec.audio_samples_written / rate)

    @property
    def video_end_s(self) -> float:
        """Media time at which the last written frame ends, seconds (0 before the first)."""
        return self.last_time + 1.0 / self.fps if self.frames_out else 0.0

    @property
    def audio_source_s(self) -> float:
        """Length of the audio given to :meth:`set_audio`, seconds (0 when none)."""
        if self._audio is None:
            return 0.0
        return len(self._audio) / self.recorder.audio_sample_rate

    @property
    def audio_written_s(self) -> float:
        """Seconds of audio in the clip so far, silence that fills gaps or pads the end included."""
        if self._audio is None:
            return 0.0
        return self.recorder.audio_samples_written / self.recorder.audio_sample_rate

    def __call__(self, rgb: np.ndarray, state: AvatarState) -> None:
        # audio first: the first write sets the file's time origin (as when all the
        # audio was written up front), then the frame it accompanies
        self._feed_audio(state.media_time_s + 1.0 / self.fps)
        self.recorder.write_video(rgb, state.media_time_s)
        self.frames_out += 1
        self.last_time = state.media_time_s

    def close(self, complete: bool = False) -> None:
        """Finish the part files: the audio ends with the video (cut or padded with silence).

        Args:
            complete: kept for callers; the audio is ended with the video either way.

        Raises:
            RecordingError: the file cannot be finished (reworded by :meth:`translate`).
        """
        try:
            try:
                if self.frames_out and not self.recorder.closed and self.recorder.error is None:
                    self._feed_audio(self.video_end_s)
                    self._pad_audio(self.video_end_s)
            finally:
                try:
                    self.recorder.close()
                finally:
                    self.sidecar.close()
        except AvatarError as exc:
            raise self.translate(exc) from exc



def note_audio_length(report: RenderReport, audio_s: float, tolerance_s: float = 0.1) -> None:
    """Warn when the audio given was cut to the video or padded with silence to its end.

    Args:
        report: the finished render (``duration_s`` = the video's length, s).
        audio_s: length of the audio given, s.
        tolerance_s: differences up to this many seconds pass without a warning.
    """
    video_s = report.duration_s
    if audio_s > video_s + tolerance_s:
        report.warnings.append(
            f"audio ({_s1(audio_s)}) is longer than the video ({_s1(video_s)}): cut to the video")
    elif audio_s < video_s - tolerance_s:
        report.warnings.append(
            f"audio ({_s1(audio_s)}) is shorter than the video ({_s1(video_s)}): "
            "padded with silence to the video's end")


def _s1(seconds: float) -> str:
    return f"{seconds:.1f} s"


def settle_outputs(writer: ClipWriter, report: RenderReport, input_path: Path) -> None:
    """Rename the finished part files over the outputs, or delete them and raise.

    Kept: a complete render, an interrupted one with at least one frame, a
    truncated input's partial render (both written as ``<stem>.partial<suffix>`` when the
    output already exists, so a finished clip is never replaced by a partial one).
    Deleted (existing outputs untouched): no frame rendered, no frame decoded, no face found.

    Raises:
        InputError: no video frame could be decoded, or the input is damaged and no face was
            found in what decoded.
        NoFaceError: no face in any frame of an undamaged input.
        RecordingError: the part files cannot be renamed.
    """
    if report.interrupted:
        settle_stopped(writer, report)
        return
    if report.frames_in == 0:
        writer.discard()
        raise InputError(f"No video frame could be decoded from {input_path}", input_path)
    if report.faces_found == 0:
        writer.discard()
        if report.input_problem:  # a damaged file, not a face out of view: say what is wrong with it
            raise InputError(f"{report.input_problem}, and no face was found in the {report.frames_in} "
                             "frames that did: nothing was written", input_path)
        raise NoFaceError(
            f"No face was found in any of the {report.frames_in} frames of {input_path}: "
            "nothing to animate (the face must be visible and well lit)."
        )
    if report.input_problem:
        _beside_existing(writer, report, "partial render")
    writer.commit()


def settle_stopped(writer: ClipWriter, report: RenderReport) -> None:
    """Keep what a stopped render rendered (even before the first face was seen), beside an
    existing output; nothing when no frame was rendered."""
    if report.frames_out == 0:
        writer.discard()
        return
    _beside_existing(writer, report, "stopped render")
    writer.commit()


def _beside_existing(writer: ClipWriter, report: RenderReport, what: str) -> None:
    """Send a partial clip to ``<stem>.partial<suffix>`` where the output already exists.

    A stopped render or a damaged input's partial render does not replace a finished clip,
    nor an earlier partial one: where ``<stem>.partial<suffix>`` exists too, the next free
    ``<stem>.partial-2<suffix>``, ``-3``, ... is used.
    """
    if not (report.output_path.exists() or report.sidecar_path.exists()):
        return
    clip = report.output_path
    partial = clip.with_name(f"{clip.stem}.partial{clip.suffix}")
    k = 2
    while partial.exists() or sidecar_path_for(partial).exists():
        partial = clip.with_name(f"{clip.stem}.partial-{k}{clip.suffix}")
        k += 1
    writer.parts.retarget(partial)
    report.output_path = partial
    report.sidecar_path = sidecar_path_for(partial)
    report.warnings.append(f"{clip} already existed and was kept; the {what} is {partial.name}")


def reraise_for_target(writer: ClipWriter, exc: BaseException) -> None:
    """Re-raise ``exc``, a recording error reworded to name the output instead of its part file."""
    if isinstance(exc, AvatarError):
        translated = writer.translate(exc)
        if translated is not exc:
            raise translated from exc
    raise exc


def check_output_name(output_path: Path, options: RenderOptions) -> None:
    """The checks of an output name that need no file written: the suffix fits the background
    (``.mov``/``.webm`` for a transparent one, ``.mp4`` else), the recording format takes it, no file
    stands where its folder would be, it is not a folder, and its sidecar is not another clip's
    (:func:`sidecar_clash`).

    :class:`ClipWriter` makes them again; a render makes them first, before its stages are built
    (seconds), so a mistyped ``-o`` is refused at once.

    Raises:
        InputError: a suffix that does not fit.
        RecordingError: a file blocks the folder, the output is a folder (the messages
            :class:`ClipWriter` gives), or its sidecar name holds another clip's track.
    """
    from avatar_app.record.formats import recording_format_for

    output_path = Path(output_path)
    transparent = options.background == "transparent"
    suffix = output_path.suffix.lower()
    if transparent and suffix not in (".mov", ".webm"):
        raise InputError(
            f"A transparent background needs a format that keeps alpha: name the output "
            f"{output_path.with_suffix('.mov').name} (ProRes 4444) or "
            f"{output_path.with_suffix('.webm').name} (VP9), not {output_path.name}",
            output_path,
        )
    if not transparent and suffix in (".mov", ".webm"):
        raise InputError(
            f"{output_path.name}: .mov and .webm are for transparent clips (--background transparent); "
            "use .mp4 for an opaque background",
            output_path,
        )
    folder = output_path.parent
    blocker = file_in_the_way(folder)
    if blocker is not None:
        raise RecordingError(f"Cannot create the output folder {folder}: {blocker} is a file, not a folder")
    if output_path.is_dir():
        raise RecordingError(f"Cannot write {output_path}: it is a folder")
    recording_format_for(output_path)
    other = sidecar_clash(output_path)
    if other is not None:
        track = sidecar_path_for(output_path).name
        raise RecordingError(
            f"Cannot write {output_path}: its blendshape track {track} is the track of {other.name}, "
            f"which it would replace. Give the output another name (for example "
            f"{output_path.stem}-2{output_path.suffix}) or move {other.name} and {track} away")


def _make_output_folder(output_path: Path) -> None:
    """Create the output's folder (and its parents) when missing, as the window does.

    Raises:
        RecordingError: the folder cannot be created (names the folder and why).
    """
    folder = output_path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = file_in_the_way(folder)
        why = f"{blocker} is a file, not a folder" if blocker is not None else (exc.strerror or exc)
        raise RecordingError(f"Cannot create the output folder {folder}: {why}") from exc


def check_output_creatable(output_path: Path) -> None:
    """Check up front that the clip and its sidecar can be created in the output's (existing) folder.

    A probe file is created in the folder and deleted, so the check holds for
    what the render will do (part files beside the targets, renamed over them),
    whatever the reason it cannot: permissions, a read-only or virtual file
    system (``/proc``), a full disk.

    Raises:
        RecordingError: one line naming the output as given and why, e.g.
            ``cannot create the output /proc/x.mp4: no file can be created in /proc
            (No such file or directory). Nothing was written``.
    """
    for target in (output_path, sidecar_path_for(output_path)):
        if target.is_dir():
            what = "it is" if target == output_path else f"its sidecar {target} is"
            raise RecordingError(f"Cannot write {output_path}: {what} a folder")
    folder = output_path.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{output_path.stem}.probe-", dir=folder)
    except OSError as exc:
        kept = f"; the existing {output_path.name} was left as it was" if output_path.exists() else ""
        raise RecordingError(f"cannot create the output {output_path}: {_create_reason(folder, exc)}. "
                             f"Nothing was written{kept}") from exc
    os.close(fd)
    os.unlink(probe)


def _create_reason(folder: Path, exc: OSError) -> str:
    """Why no file can be created in ``folder``, in words a user understands."""
    where = "the current folder" if str(folder) in ("", ".") else str(folder)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{where} is not writable (permission denied)"
    if exc.errno == errno.EROFS:
        return f"{where} is on a read-only file system"
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    return f"no file can be created in {where} ({exc.strerror or exc})"
