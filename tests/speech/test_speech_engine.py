"""EngineSpeechAnimator with the committed models/speech2face.onnx: contract, bars, profile."""
from __future__ import annotations

import json

import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape
from avatar_app.core.errors import InputError, ModelLoadError
from avatar_app.inference import EngineManager, ModelInfo
from avatar_app.pipeline.stages import StageChoice, build_speech
from avatar_app.speech import (
    SPEECH_MASK,
    LoudnessSpeechAnimator,
    SpeechAnimator,
    animate_offline,
)
from avatar_app.speech.engine_animator import (
    EngineSpeechAnimator,
    default_model_path,
    infer_features,
)
from avatar_app.speech.mel import log_mel
from tests.helpers import keyboard_clicks, load_mono16k, pink_noise, words_indicator

SR = 16000
JAW = Blendshape.jawOpen
MODEL = default_model_path()


@pytest.fixture(scope="module")
def animator() -> EngineSpeechAnimator:
    a = EngineSpeechAnimator(MODEL, manager=EngineManager(isolate=False))
    yield a
    a.close()


def test_model_files_and_contract():
    assert MODEL.is_file(), "models/speech2face.onnx must be committed"
    for suffix in (".onnx", ".val.npz", ".calib.npz", ".card.json"):
        p = MODEL.with_name("speech2face" + suffix)
        assert p.is_file() and p.stat().st_size < 5e6, p
    info = ModelInfo.from_onnx(MODEL)
    (inp,), (out,) = info.inputs, info.outputs
    assert (inp.name, inp.shape[2]) == ("features", 64) and inp.shape[:2] == (None, None)
    assert (out.name, out.shape[2]) == ("blendshapes", 52)
    prof = info.profile()["features"]
    assert prof[0][:2] == (1, 10) and prof[2][:2] == (16, 300)
    import onnx

    assert max(o.version for o in onnx.load(str(MODEL)).opset_import if o.domain in ("", "ai.onnx")) >= 17
    card = json.loads(MODEL.with_name("speech2face.card.json").read_text())
    held = card["metrics"]["heldout_flite"]
    assert 0.0 <= held["viseme_acc"] <= 1.0 and -1.0 <= held["jaw_corr"] <= 1.0


def test_is_a_speech_animator(animator):
    assert isinstance(animator, SpeechAnimator)
    assert animator.sample_rate == SR
    assert 0.5 < animator.context_s < 1.0
    assert "ort_cpu" in animator.describe()


@pytest.mark.parametrize("kind", ["silence", "white_-60", "pink_-30_clicks"])
def test_silence_and_noise_keep_the_mouth_closed(animator, kind):
    rng = np.random.default_rng(3)
    n = 2 * SR
    if kind == "silence":
        x = np.zeros(n, np.float32)
    elif kind == "white_-60":
        x = (rng.standard_normal(n) * 10 ** (-60 / 20)).astype(np.float32)
    else:
        x = pink_noise(n, rng, -30.0) + keyboard_clicks(n, rng)
    w = animate_offline(animator, x, 30.0)
    print(f"{kind}: max jawOpen {w[:, JAW].max():.4f}, max any {w.max():.4f}")
    assert w[:, JAW].max() < 0.05


def test_speech_opens_the_jaw_inside_words(animator, testdata):
    for vid in ("grid_s1_bbaf2n", "grid_s2_swwp2s"):
        x = load_mono16k(testdata / "audio" / f"{vid}.wav")
        w = animate_offline(animator, x, 25.0)
        t = np.arange(len(w)) / 25.0
        inside = words_indicator(testdata / "video" / f"{vid}.align", t)
        assert w[inside, JAW].mean() > w[~inside, JAW].mean() + 0.05
        assert not w[:, ~SPEECH_MASK].any()
        assert np.all((w >= 0) & (w <= 1))


class _ProfileSpy:
    """Wraps a slot; records every input shape the engine sees."""

    def __init__(self, slot):
        self.slot, self.shapes = slot, []

    def infer(self, feeds):
        self.shapes.append(feeds["features"].shape)
        return self.slot.infer(feeds)


def _in_profile(shapes):
    return all(1 <= b <= 16 and 10 <= t <= 300 for b, t, _ in shapes)


def test_20ms_input(animator):
    x = (0.1 * np.sin(2 * np.pi * 200 * np.arange(320) / SR)).astype(np.float32)
    animator.reset()
    w = animator.process(x, 0.02)
    assert w.shape == (52,) and np.isfinite(w).all()
    spy = _ProfileSpy(animator.slot)
    y = infer_features(spy, log_mel(x), animator.receptive_field)
    assert y.shape == (2, 52) and np.isfinite(y).all() and _in_profile(spy.shapes)


def test_40s_input_inside_profile_and_equal_to_streaming(animator, testdata):
    x = load_mono16k(testdata / "audio" / "jfk.wav")
    x = np.concatenate([x] * 4)[: 40 * SR]
    spy = _ProfileSpy(animator.slot)
    y = infer_features(spy, log_mel(x), animator.receptive_field)
    assert y.shape == (4000, 52) and _in_profile(spy.shapes)
    assert max(s[0] for s in spy.shapes) == 16  # batches fill the profile's B
    # per-frame streaming gives the same (ungated) outputs as the batched track
    animator.reset()
    for k in range(1000, 1300):
        t = k / 100.0
        end = k * 160
        animator.process(x[max(0, end - int(animator.context_s * SR)):end], t)
        np.testing.assert_allclose(animator.last_raw, y[k - 1], atol=1e-4)
    w = animate_offline(animator, x, 25.0)
    assert w.shape == (1001, 52) and np.isfinite(w).all()


def test_time_going_back_restarts_and_bad_input(animator):
    x = np.zeros(SR, np.float32)
    animator.process(x, 1.0)
    animator.process(x, 0.5)  # restart, no error
    with pytest.raises(InputError, match="mono"):
        animator.process(np.zeros((2, 10), np.float32), 1.0)
    with pytest.raises(InputError, match="NaN"):
        animator.process(np.array([np.nan], np.float32), 1.1)


def test_missing_model_falls_back_to_loudness(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        EngineSpeechAnimator(tmp_path / "none.onnx")
    assert isinstance(build_speech(StageChoice(speech_model=tmp_path / "none.onnx")), LoudnessSpeechAnimator)
    assert isinstance(build_speech(StageChoice(speech_model=MODEL, manager=EngineManager(isolate=False))),
                      EngineSpeechAnimator)
    assert build_speech(StageChoice(audio=False)) is None


def test_pipeline_default_uses_the_engine():
    a = build_speech(StageChoice())
    try:
        assert isinstance(a, EngineSpeechAnimator)
    finally:
        a.close()


def test_offline_lookahead_shifts_the_windows():
    class Rec:
        sample_rate, context_s, offline_lookahead_s = SR, 0.1, 0.06

        def __init__(self):
            self.calls = []

        def reset(self):
            self.calls.clear()

        def process(self, window, t_s):
            self.calls.append((len(window), t_s, float(window[-1]) if len(window) else None))
            return np.zeros(52, np.float32)

    x = np.arange(SR, dtype=np.float32) / SR  # sample value = its time
    r = Rec()
    animate_offline(r, x, 10.0)
    assert len(r.calls) == 11
    n, t, last = r.calls[5]
    assert t == pytest.approx(0.56) and last == pytest.approx(0.56 - 1 / SR, abs=1e-6)
    assert r.calls[-1][1] == pytest.approx(1.06)  # past the end: zeros, no error
