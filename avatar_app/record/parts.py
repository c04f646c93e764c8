"""Write-then-rename output files: a render writes hidden temporaries ("part" files) beside
its targets and renames them over the targets only when it is done.

A render that fails therefore leaves the files it was to replace exactly as they
were. ``os.replace`` within one folder is atomic on POSIX and Windows (Python
docs, ``os.replace``): a reader sees the old file or the new one, never half of it.

Names: the clip ``out/keep.mp4`` with the companion suffix ``.blendshapes.jsonl``
is written as ``out/.keep.part-<pid>-<random>.mp4`` and
``out/.keep.part-<pid>-<random>.blendshapes.jsonl``: hidden (leading dot), and
the real extension stays last, so FFmpeg and media players recognise a part
file. A render killed outright (SIGKILL, power loss) leaves its part files behind;
the clip part is a fragmented MP4 that plays up to its last complete fragment.
The next render to the same target removes parts whose process is gone
(:func:`remove_stale_parts`); parts of a render still running are left alone.
"""
from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

from avatar_app.core.errors import RecordingError

_log = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists (or cannot be checked); POSIX only."""
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def _part_pattern(clip: Path, companions: Sequence[str]) -> re.Pattern[str]:
    suffixes = "|".join(re.escape(s) for s in (clip.suffix, *companions))
    return re.compile(rf"^\.{re.escape(clip.stem)}\.part-(\d+)-[0-9a-f]+(?:{suffixes})$")


def remove_stale_parts(clip: str | Path, companions: Sequence[str] = ()) -> list[Path]:
    """Delete part files of ``clip`` left by renders that no longer run (killed, crashed).

    Args:
        clip: the target clip path.
        companions: suffixes of the companion files (see :class:`OutputParts`).

    Returns:
        The paths removed (a part that cannot be removed is logged and skipped).
    """
    clip = Path(clip)
    pattern = _part_pattern(clip, companions)
    removed = []
    try:
        entries = list(clip.parent.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = pattern.match(p.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        try:
            p.unlink()
        except OSError as e:
            _log.debug("cannot remove the stale part file %s: %s", p, e)
            continue
        _log.info("removed %s, left by a render that was killed", p)
        removed.append(p)
    return removed


def _part_base(clip: Path, pid: int, token: str) -> str:
    """The part files' shared name before their suffixes: ``.<stem>.part-<pid>-<token>``."""
    return f".{clip.stem}.part-{pid}-{token}"


def longest_part_name_bytes(clip: str | Path, companions: Sequence[str] = ()) -> int:
    """Bytes in the longest name :class:`OutputParts` gives a part file of ``clip``, for any
    process id up to 7 digits (for checking a name against the file system's limit)."""
    clip = Path(clip)
    base = _part_base(clip, 9_999_999, "0" * 8)
    return max(len(os.fsencode(base + s)) for s in (clip.suffix, *companions))


class OutputParts:
    """Temporary files for a clip and its companions, renamed over them by :meth:`commit`.

    Args:
        clip: the target clip, e.g. ``out/keep.mp4`` (its folder must exist).
        companions: suffixes that replace the clip's suffix to name companion
            targets, e.g. ``(".blendshapes.jsonl",)`` -> ``out/keep.blendshapes.jsonl``.

    Attributes:
        targets: the final paths, clip first.
        parts: the temporary paths, in the same order (not created here).

    Creating one removes stale parts of the same clip (:func:`remove_stale_parts`).
    """

    def __init__(self, clip: str | Path, companions: Sequence[str] = ()):
        clip = Path(clip)
        remove_stale_parts(clip, companions)
        base = _part_base(clip, os.getpid(), secrets.token_hex(4))
        self.companions = tuple(companions)
        self.targets = [clip] + [clip.with_suffix(s) for s in self.companions]
        self.parts = [clip.with_name(base + clip.suffix)] + [clip.with_name(base + s) for s in companions]
        self.done = False

    @property
    def clip(self) -> Path:
        """The temporary path of the clip."""
        return self.parts[0]

    def part_for(self, target: Path) -> Path:
        """The temporary path of ``target`` (one of :attr:`targets`)."""
        return self.parts[self.targets.index(Path(target))]

    def commit(self) -> None:
        """Rename every part over its target (companions first, the clip last).

        Raises:
            RecordingError: a rename failed (e.g. the target is a folder); the parts
                not yet renamed are deleted.
        """
        try:
            for part, target in reversed(list(zip(self.parts, self.targets))):
                os.replace(part, target)
        except OSError as e:
            self.discard()
            raise RecordingError(f"cannot write {target}: {e.strerror or e}") from e
        self.done = True

    def retarget(self, clip: str | Path) -> None:
        """Make :meth:`commit` rename the parts to another clip and its companions instead.

        Args:
            clip: the new target clip in the same folder (companions follow its stem).
        """
        clip = Path(clip)
        self.targets = [clip] + [clip.with_suffix(s) for s in self.companions]

    def discard(self) -> None:
        """Delete the parts that exist; the targets are left as they were. Idempotent."""
        for part in self.parts:
            try:
                part.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                _log.warning("cannot remove the temporary file %s: %s", part, e)
        self.done = True

    def rename_in(self, message: str) -> str:
        """``message`` with every part path replaced by its target path (for error messages)."""
        for part, target in zip(self.parts, self.targets):
            message = message.replace(str(part), str(target))
        return message


class TargetLock:
    """An advisory lock on a target clip, held by the one render that writes it.

    Two renders to the same ``-o`` would both write part files and both rename them over the
    target, the later one silently replacing the earlier (new-user trial). The lock is the
    operating system's on the hidden file ``.<name>.lock`` beside the target (``fcntl.flock`` on
    POSIX, ``msvcrt.locking`` on Windows), taken without waiting, so a second render is refused at
    once; the system drops it when its process ends, however it ends (a lock file left by a killed
    render holds no lock). A folder where the lock file cannot be created is not refused here:
    the writer's own checks say why nothing can be written there.

    Args:
        clip: the target clip.
    """

    def __init__(self, clip: str | Path):
        self.clip = Path(clip)
        self.path = self.clip.with_name(f".{self.clip.name}.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (idempotent).

        Raises:
            RecordingError: another process holds it: names the output and that process.
        """
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            _log.debug("no lock file for %s: %s", self.clip, e)
            return
        try:
            _lock_fd(fd)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (process {holder})" if holder else ""
            raise RecordingError(f"cannot write {self.clip}: another render{who} is writing it now; "
                                 "wait for it to finish or give another output name") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock and remove the lock file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
        try:
            _unlock_fd(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> "TargetLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_fd(fd: int) -> None:
    """Lock ``fd`` without waiting; OSError when another process holds it."""
    if os.name == "nt":
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _unlock_fd(fd: int) -> None:
    if os.name == "nt":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def _read_pid(fd: int) -> int | None:
    """The process id the lock's holder wrote into the file, or None."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 32).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
