"""EngineReconstructor: the FaceReconstructor contract, calibration, identity, engine layer, pipeline default."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.avatar.face_model import load_face_model, synthetic_landmarks
from avatar_app.core.blendshapes import Blendshape as B
from avatar_app.core.errors import InputError, ModelLoadError, TrackingError
from avatar_app.core.rotations import euler_from_rotation, rotation_from_euler
from avatar_app.core.types import FaceParams, Landmarks
from avatar_app.inference import EngineCache, EngineManager
from avatar_app.pipeline.stages import StageChoice, build_reconstructor
from avatar_app.reconstruction import FaceReconstructor
from avatar_app.reconstruction.engine import (
    EngineReconstructor,
    EngineReconstructorConfig,
    default_model_path,
    gaze_from_weights,
)
from avatar_app.reconstruction.head_pose import focal_length_px

SIZE = (640, 480)


def create_face_reconstructor(model_path=None, manager=None, on_fallback=None):
    """The stage factory's engine face path for one model file (render --face engine's policy)."""
    return build_reconstructor(StageChoice(face="engine", face_model=model_path, manager=manager,
                                           on_fallback=on_fallback))


def _lm(weights=None, ident=None, ypr=(0.0, 0.0, 0.0), t=(0.0, 0.0, -0.6)) -> Landmarks:
    m = load_face_model()
    w = np.zeros(52, np.float32) if weights is None else weights
    pts = synthetic_landmarks(m.evaluate(w, ident), rotation_from_euler(*ypr), np.array(t),
                              focal_length_px(SIZE[0], 60.0), SIZE)
    return Landmarks(pts.astype(np.float32), SIZE)


@pytest.fixture(scope="module")
def manager(face_recon_engine_cache):
    """In-process builds on the cache this module shares with its face_recon sibling (conftest)."""
    return EngineManager(cache=EngineCache(face_recon_engine_cache), isolate=False)


@pytest.fixture()
def rec(manager) -> EngineReconstructor:
    return EngineReconstructor(default_model_path(), manager=manager, backend="ort_cpu", precision="fp32")


def test_protocol_and_output(rec):
    assert isinstance(rec, FaceReconstructor)
    p = rec.reconstruct(_lm(), 0.0)
    assert isinstance(p, FaceParams)
    assert p.blendshapes.shape == (52,) and p.blendshapes.dtype == np.float32
    assert p.rotation.shape == (3, 3) and p.translation.shape == (3,) and p.gaze.shape == (2,)
    assert p.identity.shape == (15,)
    assert "ort_cpu" in rec.describe()


def test_expressions_and_pose_from_calibrated_neutral(rec):
    rec.calibrate_neutral(_lm())
    assert rec.is_calibrated
    w = np.zeros(52, np.float32)
    w[B.jawOpen] = 0.7
    w[B.eyeBlinkLeft] = 1.0
    p = rec.reconstruct(_lm(w, ypr=(0.4, 0.1, -0.2)), 1.0)
    assert p.blendshapes[B.jawOpen] > 0.5
    assert p.blendshapes[B.eyeBlinkLeft] > 0.7 and p.blendshapes[B.eyeBlinkRight] < 0.3
    yaw, pitch, roll = euler_from_rotation(p.rotation)
    assert np.degrees(abs(yaw - 0.4)) < 2 and np.degrees(abs(pitch - 0.1)) < 2 and np.degrees(abs(roll + 0.2)) < 2
    assert abs(p.translation[2] + 0.6) < 0.05


def test_automatic_neutral_and_identity(rec):
    ident = np.zeros(15, np.float32)
    ident[0] = 1.0  # a wider face
    ps = [rec.reconstruct(_lm(ident=ident), 0.04 * i) for i in range(30)]
    assert not rec.is_calibrated and rec.neutral_head is not None
    assert max(p.blendshapes.max() for p in ps) < 0.2  # a neutral face reads neutral
    assert ps[-1].identity[0] > 0.5
    first = ps[-1].identity.copy()
    # after the warm-up the identity follows slowly: a different face barely moves it in 0.5 s
    for i in range(30, 160):
        rec.reconstruct(_lm(ident=ident), 0.04 * i)
    before = rec.identity.copy()
    for i in range(160, 172):
        rec.reconstruct(_lm(ident=-ident), 0.04 * i)
    assert abs(rec.identity[0] - before[0]) < 0.1 * abs(before[0] - (-1.0)) + 1e-3
    assert abs(first[0] - before[0]) < 0.3


def test_time_must_increase_and_bad_input(rec):
    rec.reconstruct(_lm(), 1.0)
    with pytest.raises(TrackingError, match="increase"):
        rec.reconstruct(_lm(), 1.0)
    with pytest.raises(InputError):
        rec.reconstruct(Landmarks(np.zeros((468, 3), np.float32), SIZE), 2.0)
    with pytest.raises(InputError, match="finite"):
        rec.reconstruct(_lm(), float("nan"))
    rec.reset()
    rec.reconstruct(_lm(), 0.5)  # reset forgets the time


def test_gaze_from_engine_weights(rec):
    rec.calibrate_neutral(_lm())
    w = np.zeros(52, np.float32)
    w[B.eyeLookOutLeft] = w[B.eyeLookInRight] = 0.8  # both eyes toward the subject's left
    p = rec.reconstruct(_lm(w), 1.0)
    assert p.gaze[0] > np.radians(10)
    assert np.allclose(gaze_from_weights(w), [np.radians(24), 0], atol=1e-6)


def test_missing_model_and_bad_config(tmp_path, manager):
    with pytest.raises(ModelLoadError, match="not found"):
        EngineReconstructor(tmp_path / "none.onnx", manager=manager)
    with pytest.raises(InputError, match="gaze_source"):
        EngineReconstructor(default_model_path(), manager=manager,
                            config=EngineReconstructorConfig(gaze_source="ears"))
    from avatar_app.reconstruction.geometric import GeometricSolver

    assert isinstance(create_face_reconstructor(tmp_path / "none.onnx"), GeometricSolver)


@pytest.mark.parametrize("by_default", [False, True])
def test_the_face_path_is_passed_explicitly_and_default_follows_the_constant(monkeypatch, tmp_path, by_default):
    """``face`` picks the path; ``default`` is FACE_ENGINE_BY_DEFAULT (False today: the engine does not beat
    the frozen solver on real recordings yet); a chosen engine whose model is missing is the solver."""
    from avatar_app.pipeline import stages
    from avatar_app.reconstruction import engine as eng
    from avatar_app.reconstruction.geometric import GeometricSolver

    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", by_default)
    default = build_reconstructor(StageChoice())
    assert isinstance(default, EngineReconstructor if by_default else GeometricSolver)
    assert isinstance(build_reconstructor(StageChoice(face="solver")), GeometricSolver)
    engine = build_reconstructor(StageChoice(face="engine"))
    assert isinstance(engine, EngineReconstructor)
    for r in (default, engine):
        if isinstance(r, EngineReconstructor):
            r.close()
    monkeypatch.setattr(eng, "DEFAULT_MODEL", "models/no_such_model.onnx")
    recon, path = stages.build_face(StageChoice(face="engine"))
    assert isinstance(recon, GeometricSolver)
    assert (path.chosen, path.serving) == ("engine", "solver") and "no_such_model.onnx" in path.fallback
    assert path.summary().startswith("geometric solver, standing in for the learned face engine")


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_reduced_precision_passes_the_engine_layers_verification(manager, precision):
    """The engine layer builds, verifies (worst error <= 0.05 on the validation set) and serves it."""
    rec = EngineReconstructor(default_model_path(), manager=manager, backend="ort_cpu", precision=precision)
    runner = rec.slot.active
    assert runner.precision.value == precision, rec.slot.result.explain()
    v = runner.verification
    assert v is not None and v.passed and v.max_abs_error <= 0.05, v
    assert v.per_output["blendshapes"]["max_abs"] <= 0.05


def test_face_path_values(monkeypatch):
    from avatar_app.pipeline import stages

    monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", False)
    assert [stages.resolve_face_path(f) for f in stages.FACE_PATHS] == ["solver", "solver", "engine"]
    monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", True)
    assert [stages.resolve_face_path(f) for f in stages.FACE_PATHS] == ["engine", "solver", "engine"]
    for bad in ("", "1", "Engine", "learned"):
        with pytest.raises(InputError, match="is not one of default, solver, engine"):
            stages.resolve_face_path(bad)
    with pytest.raises(InputError, match="face path"):
        build_reconstructor(StageChoice(face="on"))


def test_fallback_is_told_to_the_user(tmp_path, manager):
    """When the engine was asked for but cannot be used, the caller hears why (the CLI prints it)."""
    from avatar_app.reconstruction.geometric import GeometricSolver

    heard: list[str] = []
    assert isinstance(create_face_reconstructor(tmp_path / "none.onnx", on_fallback=heard.append), GeometricSolver)
    assert len(heard) == 1 and "none.onnx" in heard[0] and "does not exist" in heard[0]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file" * 64)
    assert isinstance(create_face_reconstructor(bad, manager=manager, on_fallback=heard.append), GeometricSolver)
    assert len(heard) == 2 and "cannot be used" in heard[1] and "bad.onnx" in heard[1]
    # a working engine says nothing
    eng = create_face_reconstructor(default_model_path(), manager=manager, on_fallback=heard.append)
    assert isinstance(eng, EngineReconstructor) and len(heard) == 2
    eng.close()


def test_another_model_or_nan_weights_fall_back_to_the_solver(tmp_path, manager):
    """A valid ONNX file that is not face_recon, or face_recon with NaN weights, is refused
    when loaded (not on the first frame), so the solver stands in and the user hears why."""
    import shutil

    import onnx
    from onnx import numpy_helper

    from avatar_app.reconstruction.geometric import GeometricSolver
    from avatar_app.resources import resource_path

    other = tmp_path / "other" / "face_recon.onnx"
    other.parent.mkdir()
    shutil.copy(resource_path("models/speech2face.onnx"), other)
    heard: list[str] = []
    assert isinstance(create_face_reconstructor(other, manager=manager, on_fallback=heard.append), GeometricSolver)
    assert len(heard) == 1 and "not a face reconstruction model" in heard[0] and "landmarks" in heard[0]

    nan = tmp_path / "nan" / "face_recon.onnx"
    nan.parent.mkdir()
    m = onnx.load(str(default_model_path()))
    init = next(i for i in m.graph.initializer if numpy_helper.to_array(i).ndim == 2)
    init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), np.nan), init.name))
    onnx.save(m, str(nan))
    shutil.copy(default_model_path().with_name("face_recon.card.json"), nan.with_name("face_recon.card.json"))
    with pytest.raises(ModelLoadError, match="non-finite"):
        EngineReconstructor(nan, manager=manager, backend="ort_cpu", precision="fp32")
    assert isinstance(create_face_reconstructor(nan, manager=manager, on_fallback=heard.append), GeometricSolver)
    assert len(heard) == 2 and "non-finite" in heard[1]


@pytest.mark.gl
def test_render_reports_the_face_solver_and_a_fallback(monkeypatch, tmp_path, testdata):
    """A --face engine render whose model is missing says so in its warnings and names the solver used."""
    from avatar_app import pipeline
    from avatar_app.reconstruction import engine as eng

    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(eng, "DEFAULT_MODEL", "models/no_such_model.onnx")
    opts = pipeline.RenderOptions(size=(160, 120), use_audio=False, face="engine")
    rep = pipeline.render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", tmp_path / "o.mp4", opts)
    assert rep.face_solver == "geometric solver" and "standing in for the learned face engine" in rep.face_path
    assert any("learned face engine" in w and "no_such_model.onnx" in w for w in rep.warnings), rep.warnings
    monkeypatch.setattr(eng, "DEFAULT_MODEL", "models/face_recon.onnx")
    rep = pipeline.render_file(testdata / "video" / "grid_s1_bbaf2n.mp4", tmp_path / "o2.mp4", opts)
    assert "face_recon.onnx" in rep.face_solver and not any("learned face engine" in w for w in rep.warnings)
    assert rep.face_path == "learned face engine"


def test_depth_scale_projects_on_the_viewing_ray_and_clips():
    from avatar_app.reconstruction.engine import depth_scale

    a = np.array([0.02, -0.01, -0.40])
    assert depth_scale(a, a * 1.1) == pytest.approx(1.1)
    side = np.cross(a, [0.0, 1.0, 0.0])  # a sideways offset does not change the depth scale
    assert depth_scale(a, a + 0.01 * side / np.linalg.norm(side)) == pytest.approx(1.0)
    assert depth_scale(a, a * 5.0) == 2.0 and depth_scale(a, -a) == 0.5
    assert depth_scale(np.zeros(3), a) == 1.0


def test_calibration_samples_are_the_engines_own_inputs(manager):
    """The INT8 calibration sample of a frame (the studio's face_recon_sample) is exactly what the
    engine is fed for that frame after a neutral calibration: one pre-processing, field of view included."""
    from avatar_app.pipeline.engines import face_recon_sample

    rec = EngineReconstructor(default_model_path(), manager=manager, backend="ort_cpu", precision="fp32")
    neutral = _lm()
    w = np.zeros(52, np.float32)
    w[B.jawOpen], w[B.eyeBlinkLeft] = 0.6, 0.8
    frame = _lm(w, ypr=(0.2, -0.1, 0.05), t=(0.03, 0.0, -0.55))
    rec.calibrate_neutral(neutral)
    fed = []
    infer = rec.slot.infer
    rec.slot.infer = lambda feeds: (fed.append({k: np.array(v) for k, v in feeds.items()}), infer(feeds))[1]
    rec.reconstruct(frame, 1.0)
    sample = face_recon_sample(frame, neutral, None)
    assert set(sample) == {"landmarks", "neutral"} == set(fed[-1])
    for k in sample:
        np.testing.assert_array_equal(sample[k], fed[-1][k])
    assert face_recon_sample(None, neutral, None) is None and face_recon_sample(frame, None, None) is None
    rec.close()


@pytest.mark.parametrize("ypr", [(0.0, 0.0, 0.0), (0.5, -0.3, 0.2), (-0.7, 0.4, -0.3)])
def test_single_face_alignment_is_the_batched_one(ypr):
    """head_frame's precomputed fitter gives normalise.align's points and pose (what training fed the engine)."""
    from avatar_app.reconstruction import normalise as N
    from avatar_app.reconstruction.engine import head_frame

    w = np.zeros(52, np.float32)
    w[B.jawOpen], w[B.mouthSmileLeft], w[B.eyeBlinkRight] = 0.6, 0.8, 1.0
    lm = _lm(w, ypr=ypr, t=(0.05, -0.03, -0.5))
    for size in (SIZE, (1280, 720)):
        lm = Landmarks(lm.points, size)
        head, r0, t0 = head_frame(lm)
        ref_head, ref_r, ref_t = N.align(lm.points, size)
        assert head.dtype == np.float32 and head.shape == (478, 3)
        np.testing.assert_allclose(head, ref_head[0], atol=1e-6)
        np.testing.assert_allclose(r0, ref_r[0], atol=1e-9)
        np.testing.assert_allclose(t0, ref_t[0], atol=1e-9)
    with pytest.raises(InputError):
        head_frame(Landmarks(np.zeros((478, 3), np.float32), SIZE))


def test_single_rotation_from_6d_is_the_batched_one():
    from avatar_app.reconstruction import normalise as N

    v = np.random.default_rng(3).standard_normal((50, 6))
    batched = N.rotation_from_6d(v)
    for x, r in zip(v, batched):
        np.testing.assert_allclose(N.rotation_from_6d(x), r, atol=1e-12)
        np.testing.assert_allclose(N.rotation_from_6d(x) @ N.rotation_from_6d(x).T, np.eye(3), atol=1e-12)
