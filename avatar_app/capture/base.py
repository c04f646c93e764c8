"""The interface of a live video source: what the live pipeline and the studio need from one.

:class:`~avatar_app.capture.camera.CameraSource` (a webcam),
:class:`~avatar_app.capture.live_file.LiveFileSource` (a file played in real time
with its audio) and :class:`~avatar_app.capture.fake.FakeCamera` (synthetic frames
with an exact latency, for tests and benchmarks) implement it. It is a structural
protocol (PEP 544): a source needs no base class, and ``isinstance(src, LiveSource)``
checks that every member exists.

Contract:

- Frames are handed over through a newest-wins slot: :meth:`LiveSource.get_latest`
  returns the newest frame not yet taken, older ones are dropped and counted in
  :attr:`LiveSource.dropped`. Latency beats completeness (DESIGN.md, live mode).
- ``Frame.t_capture_ns`` is on the process clock
  (:func:`avatar_app.core.clock.now_ns`); indices increase by one per captured frame.
- A source never raises on its reader thread: a failure ends delivery and is kept in
  :attr:`LiveSource.error` (a :class:`~avatar_app.core.errors.CaptureError` or the
  exception that stopped it), which the caller shows as a one-line message.
- A source with an end (a file that does not loop) says so with
  :attr:`LiveSource.finished`; a camera never finishes.
- A source with sound writes it to :attr:`LiveSource.ring` (16 kHz mono, timestamped
  on the same clock as the frames); a silent source has ``ring = None`` and the
  microphone, if any, is a separate :class:`~avatar_app.capture.mic.MicSource`.

Thread: construct, :meth:`start`, :meth:`stop` and :meth:`get_latest` from one
controlling thread; the reader threads are the source's own.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from avatar_app.capture.ring import AudioRing
from avatar_app.core.types import Frame


@runtime_checkable
class LiveSource(Protocol):
    """A started-on-demand source of timestamped frames (see the module docstring).

    Attributes:
        granted: (width px, height px, fps) the source delivers (a camera may grant
            other values than requested).
        error: what stopped delivery, or None while it runs or after a clean stop.
    """

    granted: tuple[int, int, float]
    error: BaseException | None

    def start(self) -> LiveSource:
        """Start delivering frames (threads start here); returns self.

        Raises:
            CaptureError: the device or file cannot start.
        """
        ...

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop delivering and release the device or file; idempotent.

        Args:
            timeout_s: how long to wait for each reader thread to end, seconds.
        """
        ...

    def get_latest(self, timeout_s: float | None = 1.0) -> Frame | None:
        """The newest frame not yet taken, waiting up to ``timeout_s`` seconds for one.

        Args:
            timeout_s: seconds to wait; None waits until a frame comes or the source stops.

        Returns:
            A Frame (image (H, W, 3) uint8 BGR), or None on timeout or once stopped.
        """
        ...

    @property
    def dropped(self) -> int:
        """Frames overwritten in the slot before anyone took them."""
        ...

    @property
    def running(self) -> bool:
        """True while a reader thread runs."""
        ...

    @property
    def finished(self) -> bool:
        """True once a source with an end delivered everything (never for a camera)."""
        ...

    @property
    def ring(self) -> AudioRing | None:
        """The AudioRing the source's own sound goes to, or None for a silent source."""
        ...

    def __enter__(self) -> LiveSource:
        """``with src:`` starts the source..."""
        ...

    def __exit__(self, *exc: object) -> None:
        """...and stops it."""
        ...


class EndlessVideoMixin:
    """The :class:`LiveSource` members of a source without an end and without sound.

    A camera (real or fake) never finishes (a stopped or failed one says so in
    ``error``) and carries no audio (the microphone is a separate
    :class:`~avatar_app.capture.mic.MicSource`).
    """

    @property
    def finished(self) -> bool:
        """Always False: the source has no end."""
        return False

    @property
    def ring(self) -> None:
        """Always None: the source has no sound."""
        return None
