"""VMC protocol sender: the avatar state to other avatar apps over OSC/UDP (send only).

Specification: "VMC Protocol specification", protocol.vmc.info (English page
and the Marionette page, versions up to V2.7). We act as a *Performer* and send
to a *Marionette* (VSeeFace, Warudo, VNyan, EVMC4U in Unity, VMC4UE, VMC4B in
Blender), commonly on port 39539. Per the spec: OSC over UDP, "packets may be
bundled", unknown messages are ignored by receivers, strings are UTF-8.

One OSC bundle per tracked frame (time tag "immediately") with, in order:

- ``/VMC/Ext/Root/Pos "root" p.x p.y p.z q.x q.y q.z q.w`` (V2.0 form): the
  model root, at the origin with no rotation (we track a head, not a body).
- ``/VMC/Ext/Bone/Pos name p.x p.y p.z q.x q.y q.z q.w`` for ``Head``,
  ``LeftEye`` and ``RightEye`` (names of Unity's ``HumanBodyBones``): the
  bone's *local* pose, i.e. relative to its parent (Neck for the head, Head for
  the eyes), in Unity's axes. Positions are constants (:data:`DEFAULT_BONE_POSITIONS_M`,
  the default head's proportions) because only rotations are tracked.
- ``/VMC/Ext/Blend/Val name value`` for each of the 52 ARKit blendshapes, then
  ``/VMC/Ext/Blend/Apply`` ("after all have been sent, apply will be sent").
  Names are case-sensitive in UniVRM; the spec points to Unity's
  ``ARKitBlendShapeLocation`` (PascalCase, e.g. ``EyeBlinkLeft``, the
  "PerfectSync" clip names), our default. ``name_style="arkit"`` sends
  Apple's spelling (``eyeBlinkLeft``) instead.
- ``/VMC/Ext/OK loaded calibration_state calibration_mode tracking_status``
  (V2.7 form): 1 (model loaded), 3 (calibrated), 0 (normal mode), and 1 when
  the tracker saw a face in this frame else 0.
- ``/VMC/Ext/T time``: seconds since the first frame sent (the spec's
  "current relative time of the sender").

Coordinate conversion (our camera space -> Unity). Ours is right-handed:
x right, y up, the camera looks down -Z, and the avatar faces the camera, so
in the avatar's own frame +Z is forward, +Y up and +X is *its left*
(``AvatarState.rotation`` is identity for a subject facing the camera and is
applied to the model as is, render/renderer.py). Unity is left-handed: a
humanoid faces +Z with +Y up and +X to *its right*. The two frames share Y and
Z and differ in the sign of X, so with ``S = diag(-1, 1, 1)``:

- a position ``p`` becomes ``S p = (-x, y, z)``;
- a rotation ``R`` becomes ``S R S`` (the same physical turn, written in Unity
  coordinates); for its quaternion (x, y, z, w) this is (x, -y, -z, w), because
  conjugating by a reflection maps the turn by angle t about axis a to the turn
  by -t about ``S a``: (a sin(t/2), cos(t/2)) -> (-(S a) sin(t/2), cos(t/2)).

Check: the subject turns 20 degrees to their own left, ``R = Ry(+20 deg)``,
q = (0, sin 10deg, 0, cos 10deg); on the wire (0, -0.173648, 0, 0.984808),
which is Unity's ``Quaternion.Euler(0, -20, 0)``: a negative Unity yaw turns a
character to its left. Eye rotations are the gaze (``FaceParams.gaze``) turned
into a rotation relative to the head (:func:`avatar_app.core.rotations.gaze_rotation`,
``Ry(yaw) Rx(-pitch)``) and converted the same way.
"""
from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES
from avatar_app.core.errors import BackendUnavailableError, InputError
from avatar_app.core.types import AvatarState
from avatar_app.core.rotations import gaze_rotation, quat_from_matrix
from avatar_app.outputs.rotations import position_to_unity, quat_to_unity

_log = logging.getLogger(__name__)

#: Default receiver (the spec's common Marionette port).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 39539
#: Local bone positions in *our* avatar axes (x = the avatar's left), metres:
#: the default head's skeleton (avatar/default_head.py: head joint above the neck
#: joint, eye centres relative to the head joint). Converted to Unity on sending.
DEFAULT_BONE_POSITIONS_M: dict[str, tuple[float, float, float]] = {
    "Head": (0.0, 0.103, 0.0),
    "LeftEye": (0.034, 0.075, 0.0835),
    "RightEye": (-0.034, 0.075, 0.0835),
}
BLEND_NAME_STYLES = ("unity", "arkit")

#: VMC ``/VMC/Ext/OK`` values (V2.5/V2.7).
LOADED = 1
CALIBRATED = 3
CALIBRATION_MODE_NORMAL = 0


def blend_names(style: str = "unity") -> tuple[str, ...]:
    """The 52 blendshape names as sent: "unity" (EyeBlinkLeft) or "arkit" (eyeBlinkLeft).

    Raises:
        InputError: unknown style.
    """
    if style == "arkit":
        return BLENDSHAPE_NAMES
    if style == "unity":
        return tuple(n[0].upper() + n[1:] for n in BLENDSHAPE_NAMES)
    raise InputError(f"VMC blendshape name style must be one of {BLEND_NAME_STYLES}; got {style!r}")


@dataclass
class VmcSettings:
    """User settings of the VMC output (off by default).

    Attributes:
        enabled: send at all.
        host: receiver address (IP or name).
        port: receiver UDP port.
        name_style: blendshape names, "unity" (PascalCase, PerfectSync) or "arkit".
    """

    enabled: bool = False
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    name_style: str = "unity"

    def validate(self) -> None:
        """Raises InputError on a bad port or name style."""
        if not 1 <= int(self.port) <= 65535:
            raise InputError(f"VMC port must be 1-65535; got {self.port}")
        blend_names(self.name_style)
        if not self.host:
            raise InputError("VMC host is empty")


Message = tuple[str, list]


class VmcSender:
    """Sends one bundle per avatar state to a VMC Marionette.

    Args:
        host: receiver address.
        port: receiver UDP port (default 39539).
        name_style: blendshape names, "unity" or "arkit" (see module doc).
        bone_positions_m: local bone positions in our axes (see
            :data:`DEFAULT_BONE_POSITIONS_M`); receivers that copy bone
            positions (EVMC4U's BonePositionSynchronize) place the bones there.

    Raises:
        BackendUnavailableError: python-osc is not installed.
        InputError: bad port/style, or the host name cannot be resolved.

    Thread: ``send`` from one thread (the processing thread); never blocks for
    long (UDP) and never raises on network errors (they are counted and logged).
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                 name_style: str = "unity",
                 bone_positions_m: Mapping[str, tuple[float, float, float]] | None = None):
        VmcSettings(True, host, port, name_style).validate()
        try:
            from pythonosc import udp_client
        except ImportError as e:
            raise BackendUnavailableError(
                "the VMC output needs python-osc (pip install python-osc)") from e
        try:  # resolve once: UDPClient.send would look a host name up for every datagram
            ip = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0][4][0]
            self._client = udp_client.UDPClient(ip, int(port))
        except socket.gaierror as e:  # (an OSError: first) "[Errno -2] Name or service not known" in words
            raise InputError(f"VMC receiver {host}:{port} cannot be reached: no computer of that name or "
                             f"address is known here ({(e.strerror or str(e)).lower()})") from e
        except (OSError, ValueError, IndexError) as e:
            raise InputError(f"VMC receiver {host}:{port} cannot be reached: "
                             f"{getattr(e, 'strerror', None) or e}") from e
        self.host, self.port = host, int(port)
        self._names = blend_names(name_style)
        pos = dict(DEFAULT_BONE_POSITIONS_M)
        pos.update(bone_positions_m or {})
        self._bone_pos = {k: position_to_unity(np.asarray(v, np.float64)) for k, v in pos.items()}
        self._t0_ns: int | None = None
        self.frames_sent = 0
        self.errors = 0
        self._last_error_log = 0.0

    # ------------------------------------------------------------------ content
    def messages(self, state: AvatarState, t_s: float | None = None) -> list[Message]:
        """The messages of one frame, in sending order (pure; used by the tests).

        Args:
            state: the avatar state (weights (52,) in [0, 1], rotation (3, 3)
                camera space, gaze (2,) radians, face_found).
            t_s: value for ``/VMC/Ext/T``; default seconds since the first frame.

        Returns:
            list of (address, arguments) with Python floats/ints/strs.

        Raises:
            InputError: weights not of shape (52,), or a non-finite rotation.
        """
        w = np.asarray(state.weights, np.float64).reshape(-1)
        if w.shape != (NUM_BLENDSHAPES,):
            raise InputError(f"VMC needs 52 blendshape weights; got {w.shape}")
        if t_s is None:
            if self._t0_ns is None:
                self._t0_ns = int(state.t_capture_ns)
            t_s = (int(state.t_capture_ns) - self._t0_ns) / 1e9
        head_q = quat_to_unity(quat_from_matrix(state.rotation))
        g = np.asarray(state.gaze, np.float64).reshape(-1)
        eye_q = (quat_to_unity(quat_from_matrix(gaze_rotation(g[0], g[1])))
                 if g.size >= 2 and np.all(np.isfinite(g[:2])) else np.array([0.0, 0.0, 0.0, 1.0]))
        msgs: list[Message] = [("/VMC/Ext/Root/Pos", ["root", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])]
        for bone, q in (("Head", head_q), ("LeftEye", eye_q), ("RightEye", eye_q)):
            p = self._bone_pos[bone]
            msgs.append(("/VMC/Ext/Bone/Pos", [bone, *map(float, p), *map(float, q)]))
        clipped = np.clip(np.nan_to_num(w), 0.0, 1.0)
        msgs += [("/VMC/Ext/Blend/Val", [n, float(v)]) for n, v in zip(self._names, clipped)]
        msgs.append(("/VMC/Ext/Blend/Apply", []))
        msgs.append(("/VMC/Ext/OK", [LOADED, CALIBRATED, CALIBRATION_MODE_NORMAL,
                                     1 if state.face_found else 0]))
        msgs.append(("/VMC/Ext/T", [float(t_s)]))
        return msgs

    def bundle(self, state: AvatarState, t_s: float | None = None):
        """The frame as one python-osc ``OscBundle`` (time tag: immediately)."""
        from pythonosc import osc_bundle_builder, osc_message_builder

        b = osc_bundle_builder.OscBundleBuilder(osc_bundle_builder.IMMEDIATELY)
        for address, args in self.messages(state, t_s):
            m = osc_message_builder.OscMessageBuilder(address=address)
            for a in args:
                m.add_arg(a)  # str -> s, float -> f (32-bit), int -> i
            b.add_content(m.build())
        return b.build()

    # ------------------------------------------------------------------ sending
    def send(self, state: AvatarState) -> bool:
        """Send one frame. Network errors are logged (at most every 5 s) and counted.

        Returns:
            True if the datagram was handed to the OS.

        Raises:
            InputError: a malformed state (see :meth:`messages`).
        """
        dgram = self.bundle(state)
        try:
            self._client.send(dgram)
        except OSError as e:
            self.errors += 1
            now = time.monotonic()
            if now - self._last_error_log > 5.0:
                _log.warning("VMC send to %s:%d failed (%d so far): %s", self.host, self.port,
                             self.errors, e)
                self._last_error_log = now
            return False
        self.frames_sent += 1
        return True

    def close(self) -> None:
        """Close the socket. Idempotent."""
        sock = getattr(self._client, "_sock", None)
        if isinstance(sock, socket.socket):
            sock.close()

    def __enter__(self) -> VmcSender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
