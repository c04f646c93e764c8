"""The studio's live output fan-out: VMC, the virtual camera and calibration samples (Qt-free).

Per tracked frame (pipeline thread): the calibration sampler, when one runs,
then the VMC sender. Per rendered frame (the view's 1280x720 renders, see
:attr:`avatar_app.pipeline.session.StudioSession.frame_rendered`): the virtual
camera. Recordings take the same rendered frames (``ui/recording.py``).
"""
from __future__ import annotations

import logging

from avatar_app.core.errors import AvatarError

log = logging.getLogger(__name__)

#: Size of window recordings and of the virtual camera's frames, pixels (width, height).
RECORD_SIZE = (1280, 720)
#: Frame rate of window recordings and the virtual camera, Hz.
RECORD_FPS = 30.0


class LiveOutputs:
    """VMC sender, virtual camera and calibration sampler of a session.

    Args:
        session: the StudioSession (its ``events.output_status`` hears what the outputs do,
            its ``pipeline`` is handed to the sampler, its ``settings.avatar`` gives the
            virtual camera's background).

    Attributes:
        vmc: the VmcSender while the VMC output is on, else None.
        vcam: the VirtualCamera while it is on, else None.
        sampler: ``sampler(state, pipeline)`` called per frame on the pipeline thread (the
            calibration wizard's SampleCollector), or None.

    Thread: :meth:`apply` and :meth:`close` from the controlling thread; :meth:`on_state`
    on the pipeline thread; :meth:`on_frame_rendered` where the view hands frames over.
    """

    def __init__(self, session):
        self.session = session
        self.vmc = None
        self.vcam = None
        self.sampler = None
        self._vmc_key = None

    @property
    def capturing(self) -> bool:
        """Whether rendered frames are wanted (the virtual camera runs)."""
        return self.vcam is not None

    def apply(self, o) -> None:
        """Open or close the VMC sender and the virtual camera as OutputSettings ``o`` say."""
        status = self.session.events.output_status
        want = (o.vmc_host, o.vmc_port, o.vmc_names) if o.vmc_enabled else None
        if want != self._vmc_key:
            old, self.vmc, self._vmc_key = self.vmc, None, None
            if old is not None:
                old.close()
            text = "Off."
            if want is not None:
                try:
                    from avatar_app.outputs import VmcSender

                    self.vmc = VmcSender(o.vmc_host, o.vmc_port, name_style=o.vmc_names)
                    self._vmc_key = want
                    text = f"Sending to {o.vmc_host}:{o.vmc_port}."
                except (AvatarError, ImportError) as exc:
                    text = f"Not sending: {exc}"
            status.emit("vmc", text)
        if o.virtual_camera and self.vcam is None:
            try:
                from avatar_app.outputs import VirtualCamera

                bg = self.session.settings.avatar.background
                self.vcam = VirtualCamera(*RECORD_SIZE, RECORD_FPS,
                                          background=tuple(bg) if isinstance(bg, list) else (0, 177, 64))
                status.emit("vcam", f"Sending to {self.vcam.device}.")
            except (AvatarError, ImportError) as exc:
                status.emit("vcam", f"Not available: {exc}")
        elif not o.virtual_camera and self.vcam is not None:
            vcam, self.vcam = self.vcam, None
            vcam.close()
            status.emit("vcam", "Off.")

    def on_state(self, state) -> None:
        """Pipeline thread: the calibration sampler, then the VMC sender (errors logged, never raised)."""
        sampler = self.sampler
        if sampler is not None:
            sampler(state, self.session.pipeline)
        vmc = self.vmc
        if vmc is not None:
            try:
                vmc.send(state)
            except AvatarError as exc:
                log.debug("VMC frame not sent: %s", exc)
        self.session.events.state.emit(state)

    def on_frame_rendered(self, rgb, state) -> None:
        """A 1280x720 render: to the virtual camera (closed, with a message, when it fails)."""
        vcam = self.vcam
        if vcam is None:
            return
        try:
            vcam.send(rgb)
        except AvatarError as exc:
            log.warning("virtual camera stopped: %s", exc)
            self.vcam = None
            vcam.close()
            self.session.events.output_status.emit("vcam", f"Stopped: {exc}")

    def close(self) -> None:
        """Close the VMC sender and the virtual camera."""
        for out in (self.vmc, self.vcam):
            if out is not None:
                out.close()
        self.vmc = self.vcam = None
        self.sampler = None
