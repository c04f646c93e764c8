"""VMC sender: golden values worked out by hand from the spec, and a real OSC server on loopback.

Hand derivations (module doc of outputs/vmc.py): our axes x = the avatar's left,
y up, z forward (toward the camera); Unity's x = the avatar's right. A rotation
R of ours is sent as S R S with S = diag(-1, 1, 1); its quaternion (x, y, z, w)
becomes (x, -y, -z, w).

- Yaw +20 deg (the subject turns to their own left): R = Ry(+20 deg),
  q = (0, sin 10 deg, 0, cos 10 deg) = (0, 0.1736482, 0, 0.9848078);
  on the wire (0, -0.1736482, 0, 0.9848078) = Unity Quaternion.Euler(0, -20, 0).
- Chin up 10 deg: R = Rx(-10 deg) (Rx(+) tips +Z toward -Y), q = (-0.0871557, 0, 0,
  0.9961947); on the wire unchanged (x keeps its sign) = Unity Euler(-10, 0, 0),
  and a negative Unity x rotation looks up.
- Head tilted 15 deg toward the subject's right shoulder: R = Rz(+15 deg),
  q = (0, 0, 0.1305262, 0.9914449); on the wire (0, 0, -0.1305262, 0.9914449).
- Eyes looking 10 deg to the subject's left: gaze yaw +10 deg, R = Ry(10 deg);
  on the wire (0, -0.0871557, 0, 0.9961947).
- Bone positions: LeftEye at our (+0.034, 0.075, 0.0835) m -> (-0.034, 0.075, 0.0835).
"""
from __future__ import annotations

import math
import socket
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from pythonosc import dispatcher as osc_dispatcher
from pythonosc import osc_bundle, osc_server

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, Blendshape
from avatar_app.core.errors import InputError
from avatar_app.core.types import AvatarState
from avatar_app.core.rotations import quat_from_matrix, rot_x, rot_y, rot_z
from avatar_app.outputs.rotations import quat_to_unity
from avatar_app.outputs.vmc import DEFAULT_PORT, VmcSender, VmcSettings, blend_names


def state(rotation=np.eye(3), gaze=(0.0, 0.0), face=True, t_ns=0, weights=None) -> AvatarState:
    s = AvatarState.neutral(t_capture_ns=t_ns)
    return replace(s, rotation=np.asarray(rotation, np.float32), gaze=np.asarray(gaze, np.float32),
                   face_found=face, weights=np.zeros(52, np.float32) if weights is None else weights)


@pytest.fixture
def sender():
    s = VmcSender("127.0.0.1", 9)  # discard port; messages() does not send
    yield s
    s.close()


def bone(msgs, name):
    return next(args for addr, args in msgs if addr == "/VMC/Ext/Bone/Pos" and args[0] == name)


@pytest.mark.parametrize("rotation, expected", [
    (rot_y(math.radians(20)), (0.0, -0.1736482, 0.0, 0.9848078)),
    (rot_x(math.radians(-10)), (-0.0871557, 0.0, 0.0, 0.9961947)),
    (rot_z(math.radians(15)), (0.0, 0.0, -0.1305262, 0.9914449)),
    (np.eye(3), (0.0, 0.0, 0.0, 1.0)),
], ids=["yaw-left-20", "chin-up-10", "roll-right-15", "identity"])
def test_head_quaternion_golden(sender, rotation, expected):
    args = bone(sender.messages(state(rotation), t_s=0.0), "Head")
    assert args[1:4] == pytest.approx([0.0, 0.103, 0.0], abs=1e-7)
    assert args[4:8] == pytest.approx(expected, abs=2e-6)


def test_eye_quaternion_and_positions_golden(sender):
    msgs = sender.messages(state(gaze=(math.radians(10), 0.0)), t_s=0.0)
    for name, x in (("LeftEye", -0.034), ("RightEye", 0.034)):
        args = bone(msgs, name)
        assert args[1:4] == pytest.approx([x, 0.075, 0.0835], abs=1e-7)
        assert args[4:8] == pytest.approx([0.0, -0.0871557, 0.0, 0.9961947], abs=2e-6)


def test_message_order_names_and_status(sender):
    w = np.linspace(0, 1, 52).astype(np.float32)
    w[Blendshape.jawOpen] = 1.7  # out of range: clipped to 1
    msgs = sender.messages(state(weights=w, face=False), t_s=1.25)
    addrs = [a for a, _ in msgs]
    assert addrs[0] == "/VMC/Ext/Root/Pos"
    assert msgs[0][1] == ["root", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert addrs[1:4] == ["/VMC/Ext/Bone/Pos"] * 3
    vals = [args for a, args in msgs if a == "/VMC/Ext/Blend/Val"]
    assert [v[0] for v in vals][:3] == ["EyeBlinkLeft", "EyeLookDownLeft", "EyeLookInLeft"]
    assert len(vals) == 52 and {v[0][0].lower() + v[0][1:] for v in vals} == set(BLENDSHAPE_NAMES)
    got = {v[0]: v[1] for v in vals}
    assert got["JawOpen"] == 1.0 and got["EyeBlinkLeft"] == 0.0
    assert got["TongueOut"] == pytest.approx(1.0)
    assert addrs.index("/VMC/Ext/Blend/Apply") == max(i for i, a in enumerate(addrs)
                                                      if a == "/VMC/Ext/Blend/Val") + 1
    assert dict(msgs)["/VMC/Ext/OK"] == [1, 3, 0, 0]  # loaded, calibrated, normal, no face
    assert dict(msgs)["/VMC/Ext/T"] == [1.25]
    apple = VmcSender("127.0.0.1", 9, name_style="arkit")
    assert apple.messages(state(), 0.0)[4][1][0] == "eyeBlinkLeft"
    apple.close()


def test_quaternion_conversion_matches_mirrored_matrix():
    rng = np.random.default_rng(0)
    s = np.diag([-1.0, 1.0, 1.0])
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        from avatar_app.core.rotations import matrix_from_quat

        r = matrix_from_quat(q)
        qu = quat_to_unity(quat_from_matrix(r))
        ref = quat_from_matrix(s @ r @ s)
        assert np.allclose(qu, ref, atol=1e-9) or np.allclose(qu, -ref, atol=1e-9)


def test_settings_are_off_by_default_and_validated():
    st = VmcSettings()
    assert not st.enabled and st.port == DEFAULT_PORT == 39539 and st.host == "127.0.0.1"
    with pytest.raises(InputError, match="port"):
        VmcSettings(port=70000).validate()
    with pytest.raises(InputError, match="name style"):
        blend_names("vrm")
    with pytest.raises(InputError, match="cannot be reached: no computer of that name") as err:
        VmcSender("no-such-host.invalid", 39539)
    assert "[Errno" not in str(err.value)
    with pytest.raises(InputError, match="52"):
        VmcSender("127.0.0.1", 9).messages(replace(state(), weights=np.zeros(5, np.float32)))


def test_real_osc_server_on_loopback_receives_the_stream():
    received: list[tuple[str, tuple]] = []
    lock = threading.Lock()

    def handler(address, *args):
        with lock:
            received.append((address, args))

    disp = osc_dispatcher.Dispatcher()
    disp.set_default_handler(handler)
    server = osc_server.ThreadingOSCUDPServer(("127.0.0.1", 0), disp)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sender = VmcSender("127.0.0.1", server.server_address[1])
        w = np.zeros(52, np.float32)
        for i in range(5):
            w[Blendshape.jawOpen] = 0.2 * i
            assert sender.send(state(rot_y(math.radians(20)), weights=w.copy(), t_ns=i * 33_000_000))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            with lock:
                if sum(a == "/VMC/Ext/T" for a, _ in received) == 5:
                    break
            time.sleep(0.01)
        sender.close()
    finally:
        server.shutdown()
        server.server_close()
    with lock:
        msgs = list(received)
    # the threading server handles each datagram in its own thread: compare as sets
    times = sorted(args[0] for a, args in msgs if a == "/VMC/Ext/T")
    assert times == pytest.approx([0.0, 0.033, 0.066, 0.099, 0.132], abs=1e-6)
    jaw = sorted(args[1] for a, args in msgs if a == "/VMC/Ext/Blend/Val" and args[0] == "JawOpen")
    assert jaw == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8], abs=1e-6)
    heads = [args for a, args in msgs if a == "/VMC/Ext/Bone/Pos" and args[0] == "Head"]
    assert len(heads) == 5
    assert heads[0][4:] == pytest.approx((0.0, -0.1736482, 0.0, 0.9848078), abs=2e-6)
    assert sum(a == "/VMC/Ext/Blend/Apply" for a, _ in msgs) == 5
    assert [args for a, args in msgs if a == "/VMC/Ext/OK"][0] == (1, 3, 0, 1)


def test_one_bundle_per_frame_on_the_wire():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5.0)
    try:
        sender = VmcSender("127.0.0.1", sock.getsockname()[1])
        sender.send(state())
        data, _ = sock.recvfrom(65536)
        sender.close()
    finally:
        sock.close()
    assert osc_bundle.OscBundle.dgram_is_bundle(data)
    b = osc_bundle.OscBundle(data)
    assert b.num_contents == 3 + 1 + 52 + 1 + 1 + 1
    assert len(data) < 4096  # well inside one UDP datagram
