"""The post-processing chain's per-frame fast paths against a frozen copy of the code they replaced.

Issue 18 made mouth fusion, the tuner (its six One Euro filters run as one stacked step,
remap in place, no dataclass ``replace``) and the processor's state bookkeeping cheaper.
tests/frozen_post_chain.py keeps the code as it was; on a real clip's per-frame inputs
(GRID, tracked and reconstructed, with the speech engine's mouth) the product must give
byte-identical states under the default settings and under settings that take the slow
paths (slider moves, a region off, mirror off, linked eyes, lost face, an expression, a
value that is not finite, a repeated time).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from frozen_post_chain import FrozenAvatarTuner, FrozenFusion, FrozenOneEuroFilter

from avatar_app.core.errors import AvatarError
from avatar_app.core.types import AvatarState, FaceParams, state_with
from avatar_app.fusion.chain import PostChain
from avatar_app.fusion.expressions import ExpressionLayer
from avatar_app.fusion.filters import OneEuroFilter
from avatar_app.fusion.mouth import FusionSettings
from avatar_app.fusion.tuning import TuningSettings

ARRAYS = ("weights", "rotation", "translation", "gaze", "vision_weights", "audio_weights")


@pytest.fixture(scope="module")
def clip_run(testdata):
    """Each frame's fuse inputs (vision, audio, face_found, t) and the processor's states, on a GRID clip."""
    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.pipeline import SPEECH_RATE, FrameProcessor, StageChoice, audio_window, build_stages

    built = build_stages(StageChoice(live=False, audio=True, tracker="mediapipe"))
    proc = FrameProcessor(built.tracker, built.reconstructor, built.speech, live=False, chain=built.chain,
                          speech_order="sequential")
    proc.speech_lookahead_s = float(getattr(built.speech, "offline_lookahead_s", 0.0) or 0.0)
    context_s = float(getattr(built.speech, "context_s", 0.1))
    inputs, states = [], []
    fuse = built.chain.fuse

    def recording_fuse(vision, audio, face_found, t_s):
        inputs.append((vision, np.array(audio), face_found, t_s))
        return fuse(vision, audio, face_found, t_s)

    built.chain.fuse = recording_fuse
    with VideoFileSource(testdata / "video" / "grid_s1_bbaf2n.mp4") as src:
        audio = src.read_audio(SPEECH_RATE)
        frames = list(src.frames())
    for f in frames:
        window = audio_window(audio.samples, SPEECH_RATE,
                              f.media_time_s - float(audio.media_time_s) + proc.speech_lookahead_s, context_s)
        states.append(proc.process(f, window))
    proc.close()
    built.tracker.close() if hasattr(built.tracker, "close") else None
    assert len(inputs) == len(frames) > 50 and sum(i[2] for i in inputs) > 50
    assert max(float(np.abs(i[1]).max()) for i in inputs) > 0.05  # the voice moved the mouth
    return frames, inputs, states


def assert_same(a: AvatarState, b: AvatarState, where: str) -> None:
    for k in ARRAYS:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f"{where}: {k}"
    for k in ("t_capture_ns", "media_time_s", "face_found", "frame_index"):
        assert getattr(a, k) == getattr(b, k), f"{where}: {k}"


def filter_states(tuner) -> dict[str, bytes]:
    """Each running One Euro filter's float64 value and derivative (the frozen tuner's or the stacked one's)."""
    if isinstance(tuner, FrozenAvatarTuner):
        return {k: f._x.reshape(-1).tobytes() + f._dx.reshape(-1).tobytes() for k, f in tuner._filters.items()
                if f._x is not None}
    keys = [k for k, *_ in tuner._segments] if tuner._steady is not None else list(tuner._seg_t)
    rows = {k: idx for k, _, _, idx in tuner._segments}
    return {k: tuner._x[rows[k]].tobytes() + tuner._dx[rows[k]].tobytes() for k in keys}


def _fused_state(fusion, vision: FaceParams, audio, face_found, t, i) -> AvatarState:
    w, r, tr = fusion.fuse(vision, audio, face_found, t)
    return AvatarState(t_capture_ns=i, media_time_s=t, weights=w, rotation=r, translation=tr,
                       gaze=np.asarray(vision.gaze, np.float32), face_found=face_found,
                       vision_weights=np.asarray(vision.blendshapes, np.float32), audio_weights=audio,
                       frame_index=i)


def _run_both(inputs, script):
    """Old and new chain over the inputs; ``script(k, frozen, product, vision, face_found, t)`` may change
    settings or inputs before frame k (returning the vision, face_found and t to use)."""
    old_layer, new_layer = ExpressionLayer(), ExpressionLayer()
    old_fu, old_tu = FrozenFusion(FusionSettings(smoothing=False)), FrozenAvatarTuner(expressions=old_layer)
    new = PostChain(expressions=new_layer)
    compared = 0
    for k, (vision, audio, face_found, t) in enumerate(inputs):
        vision, face_found, t = script(k, (old_tu, old_layer, old_fu), (new.tuner, new_layer, new.fusion),
                                       vision, face_found, t)
        a = _fused_state(old_fu, vision, audio, face_found, t, k)
        b = _fused_state(new.fusion, vision, audio, face_found, t, k)
        assert_same(a, b, f"fused frame {k}")
        results = []
        for tune, state in ((old_tu, a), (new.tuner, b)):
            try:
                results.append(tune(state))
            except AvatarError as exc:
                results.append(exc)
        ra, rb = results
        if isinstance(ra, Exception) or isinstance(rb, Exception):
            assert type(ra) is type(rb) and str(ra) == str(rb), f"frame {k}: {ra!r} / {rb!r}"
        else:
            assert_same(ra, rb, f"tuned frame {k}")
            compared += 1
        assert old_tu.preview()[-1:] == new.tuner.preview()[-1:]
        assert filter_states(old_tu) == filter_states(new.tuner), f"filter state after frame {k}"
    return compared


def test_default_settings_bit_identical(clip_run):
    _, inputs, _ = clip_run
    assert _run_both(inputs, lambda k, old, new, v, ff, t: (v, ff, t)) == len(inputs)


def _set(k, old, new, settings: TuningSettings) -> None:
    for tuner, *_ in (old, new):
        tuner.set_settings(settings)


def test_slow_paths_bit_identical(clip_run):
    _, inputs, _ = clip_run
    base = TuningSettings()

    def script(k, old, new, vision, face_found, t):
        if k == 8:  # sliders move (new cut-offs, values held), mirror off, linked eyes, a remap
            s = base.copy()
            s.smoothing.update(eyes=0.7, head=0.2)
            s.mirror, s.link_eyes = False, True
            s.sensitivity[3:9] = 1.7
            s.remap_min[20:30], s.remap_max[40:44] = 0.05, 0.6
            _set(k, old, new, s)
        if k == 16:  # a region off, then on again
            s = base.copy()
            s.smoothing.update(mouth=0.0, head=0.0)
            _set(k, old, new, s)
        if k == 22:
            _set(k, old, new, base)
        if k == 26:  # an expression fades in and out
            for _, layer, _ in (old, new):
                layer.set_active("happy", True)
        if k == 34:
            for _, layer, _ in (old, new):
                layer.set_active("happy", False)
        if 30 <= k < 62:  # the face lost for 1.3 s: hold, auto-blink, idle motion
            face_found = False
        if k in (40, 41):  # a gaze that is not finite: the tuner raises, then goes on
            vision = replace(vision, gaze=np.array([np.nan, 0.1], np.float32))
        if k == 45:  # a repeated time
            t = inputs[k - 1][3]
        if k == 50:  # the mouth covered; less audio mix
            for _, _, fusion in (old, new):
                fusion.settings = replace(fusion.settings, mouth_covered=True)
        if k == 56:
            for _, _, fusion in (old, new):
                fusion.settings = replace(fusion.settings, mouth_covered=False, audio_mix=0.8)
        if k == 66:
            for tuner, *_ in (old, new):
                tuner.reset()
        return vision, face_found, t

    compared = _run_both(inputs, script)
    assert len(inputs) - 4 <= compared < len(inputs)  # frames 40, 41 (and what follows) raise alike


def test_processor_states_equal_the_frozen_chain(clip_run):
    """The processor's own states (its bookkeeping around fuse and tune) equal the frozen chain's."""
    frames, inputs, states = clip_run
    fusion, tuner = FrozenFusion(FusionSettings(smoothing=False)), FrozenAvatarTuner()
    for k, ((vision, audio, face_found, t), frame, got) in enumerate(zip(inputs, frames, states)):
        w, r, tr = fusion.fuse(vision, audio, face_found, t)
        fused = AvatarState(t_capture_ns=frame.t_capture_ns, media_time_s=t, weights=w, rotation=r,
                            translation=tr, gaze=np.asarray(vision.gaze, np.float32), face_found=face_found,
                            vision_weights=np.asarray(vision.blendshapes, np.float32),
                            audio_weights=np.asarray(audio, np.float32), frame_index=frame.index)
        assert_same(tuner(fused), got, f"processor frame {k}")
        assert {"track", "reconstruct", "speech", "fuse", "tune"} <= set(got.stamps)


def test_state_with_equals_replace():
    s = AvatarState.neutral(5, 0.25)
    a, b = state_with(s, weights=np.ones(52, np.float32), frame_index=3), replace(
        s, weights=np.ones(52, np.float32), frame_index=3)
    assert a.__dict__.keys() == b.__dict__.keys() and a.frame_index == 3 and a.weights.tobytes() == b.weights.tobytes()
    assert s.frame_index == 0 and type(a) is AvatarState
    with pytest.raises(TypeError):
        state_with(s, weight=1)
    assert math.isclose(a.media_time_s, 0.25)


def _frozen_nearest_rotation(m):
    """core.rotations.nearest_rotation at ceffc40 (numpy's determinant for the reflection test)."""
    u, _, vt = np.linalg.svd(np.asarray(m, np.float64))
    q = u @ vt
    if np.linalg.det(q) < 0:
        u[:, -1] *= -1
        q = u @ vt
    return q


def test_rotation_helpers_bit_identical():
    """nearest_rotation's sign test and euler_from_rotation's scalar reads give numpy's values exactly."""
    from avatar_app.core.rotations import euler_from_rotation, nearest_rotation, rotation_from_euler

    rng = np.random.default_rng(3)
    mats = [rng.normal(size=(3, 3)) for _ in range(300)]  # half of them reflections
    mats += [rotation_from_euler(*rng.uniform(-3, 3, 3)) + rng.normal(scale=1e-3, size=(3, 3)) for _ in range(300)]
    mats += [np.diag([1.0, 1.0, -1.0]), np.eye(3), np.diag([-1.0, -1.0, -1.0]), np.zeros((3, 3))]
    assert any(np.linalg.det(m) < 0 for m in mats) and any(np.linalg.det(m) > 0 for m in mats)
    for m in mats:
        assert nearest_rotation(m).tobytes() == _frozen_nearest_rotation(m).tobytes()
        r = np.asarray(nearest_rotation(m), np.float32)
        cos_p = math.hypot(float(r[1, 0]), float(r[1, 1]))
        want = (math.atan2(r[0, 2], r[2, 2]), math.atan2(r[1, 2], cos_p), math.atan2(r[1, 0], r[1, 1]))
        assert euler_from_rotation(r) == want
    with pytest.raises(AvatarError):
        nearest_rotation(np.full((3, 3), np.nan))


@pytest.mark.parametrize("params", [dict(min_cutoff_hz=3.0, beta=0.5),
                                    dict(min_cutoff_hz=1.5, beta=0.3, d_cutoff_hz=2.0),
                                    dict(min_cutoff_hz=np.linspace(0.5, 4, 7), beta=np.linspace(0, 1, 7))])
@pytest.mark.parametrize("shape", [(7,), (), (3, 3)])
def test_one_euro_filter_bit_identical(params, shape):
    """OneEuroFilter (in place, one_euro_step) equals the paper's formulas on a noisy signal."""
    if shape != (7,) and np.ndim(params["beta"]):
        shape = (7,)
    rng = np.random.default_rng(11)
    new, old = OneEuroFilter(**params), FrozenOneEuroFilter(**params)
    t = 0.0
    for k in range(200):
        t += float(rng.uniform(0.01, 0.06))
        x = np.sin(t * 3 + np.arange(int(np.prod(shape)))).reshape(shape) + rng.normal(scale=0.05, size=shape)
        a, b = new(x, t), old(x, t)
        assert a.shape == b.shape == shape and a.tobytes() == b.tobytes(), k
    assert new._dx.tobytes() == old._dx.tobytes()


def test_all_finite_equals_numpy():
    from avatar_app.core.arrays import all_finite

    cases = [np.zeros(0), np.float32(1.5), np.array(np.inf), np.ones((3, 3)), np.array([1.0, np.nan]),
             np.array([[0.0, -np.inf]], np.float32), 2.0, float("nan"), np.arange(66.0)]
    for a in cases:
        assert all_finite(a) is bool(np.isfinite(a).all())
