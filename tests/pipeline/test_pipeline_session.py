"""StudioSession without Qt, and the bar of issue 16: the studio and `render --settings` make the same avatar."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from avatar_app.core.blendshapes import Blendshape
from avatar_app.pipeline.settings import MemoryStore, StudioSettings, load_settings_file

ROOT = Path(__file__).resolve().parents[2]
VIDEO = "video/grid_s1_bbaf2n.mp4"
#: Per-frame agreement asked of the studio's offline mode and `render --settings`.
PARITY_TOL = 1e-5


def _session(tmp_path, monkeypatch):
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.pipeline.session import StudioSession

    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    return StudioSession(MemoryStore(), engines=EngineController(models={"face_recon": None, "speech2face": None}))


def _studio_look(session) -> None:
    """Non-default settings, set as the panels set them: mirror on, sensitivity, remap, smoothing,
    link eyes, auto-blink and idle motion off, the custom expression changed."""
    t = session.chain.tuner.settings
    t.mirror = True
    t.link_eyes = True
    t.auto_blink = False
    t.idle_motion = False
    t.smoothing = {"eyes": 0.7, "brows": 0.2, "mouth": 0.3, "head": 0.8}
    t.sensitivity[Blendshape.jawOpen] = 1.8
    t.sensitivity[Blendshape.mouthSmileLeft] = 0.0  # an expression off
    t.remap_min[Blendshape.browInnerUp], t.remap_max[Blendshape.browInnerUp] = 0.05, 0.7
    session.set_tuning(t)
    e = session.settings.expressions
    e.custom = "jawOpen=0.7, tongueOut=1"
    session.set_expression_settings(e)


def test_studio_offline_mode_and_render_settings_give_the_same_avatar(tmp_path, testdata, monkeypatch):
    """A dev video through StudioSession's offline mode and through `avatar-app render --settings FILE`
    with the session's exported settings: per-frame blendshapes and head pose agree within 1e-5."""
    from avatar_app import cli
    from avatar_app.record import sidecar as sidecar_mod
    from avatar_app.record.sidecar import read_sidecar

    video = testdata / VIDEO
    session = _session(tmp_path, monkeypatch)
    try:
        _studio_look(session)
        settings_file = session.export_settings(tmp_path / "studio.json")
        studio = session.run_offline(video)
    finally:
        session.close()
    assert len(studio) >= 70 and sum(s.face_found for s in studio) >= 70

    rendered = []  # every state render writes into its sidecar, at full precision
    write = sidecar_mod.SidecarWriter.write
    monkeypatch.setattr(sidecar_mod.SidecarWriter, "write",
                        lambda self, state, media_time_s=None: (rendered.append(state), write(self, state,
                                                                                            media_time_s))[1])
    out = tmp_path / "render.mp4"
    assert cli.main(["render", str(video), "-o", str(out), "--settings", str(settings_file), "--size", "96x64",
                     "-q"]) == 0
    assert len(rendered) == len(studio)
    worst = {"weights": 0.0, "rotation": 0.0, "translation": 0.0, "gaze": 0.0}
    for a, b in zip(studio, rendered):
        assert a.frame_index == b.frame_index and a.media_time_s == b.media_time_s
        assert a.face_found == b.face_found
        for key, x, y in (("weights", a.weights, b.weights), ("rotation", a.rotation, b.rotation),
                          ("translation", a.translation, b.translation), ("gaze", a.gaze, b.gaze)):
            worst[key] = max(worst[key], float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y)))))
    print(f"parity (max abs difference over {len(studio)} frames): {worst}")
    assert max(worst.values()) <= PARITY_TOL, worst

    # the file says the same (to the sidecar's rounding), and the look really differs from a fresh studio's
    track = read_sidecar(out.with_suffix(".blendshapes.jsonl"))
    ws = np.stack([s.weights for s in studio])
    assert np.abs(track.blendshapes - np.round(ws, 4)).max() <= PARITY_TOL
    assert np.abs(track.rotation - np.round(np.stack([s.rotation for s in studio]), 6)).max() <= PARITY_TOL
    assert ws[:, Blendshape.mouthSmileRight].max() == 0.0  # mirror: the user's left smile is the avatar's right
    assert np.array_equal(ws[:, Blendshape.eyeBlinkLeft], ws[:, Blendshape.eyeBlinkRight])  # eyes linked
    default = _session(tmp_path / "fresh", monkeypatch)
    try:
        fresh = default.run_offline(video)
    finally:
        default.close()
    assert np.abs(np.stack([s.weights for s in fresh]) - ws).max() > 0.05


def test_settings_file_round_trip_and_bad_files(tmp_path):
    from avatar_app.core.errors import InputError
    from avatar_app.pipeline.settings import save_settings_file

    s = StudioSettings()
    s.tuning.mirror = False
    s.tuning.sensitivity[Blendshape.jawOpen] = 2.5
    s.avatar.background = "transparent"
    s.avatar.lighting = "soft"
    s.expressions.custom = "tongueOut=0.5"
    s.fusion.audio_mix = 0.8
    path = save_settings_file(tmp_path / "a" / "s.json", s)
    back = load_settings_file(path)
    assert back.tuning.mirror is False and back.tuning.sensitivity[Blendshape.jawOpen] == pytest.approx(2.5)
    assert back.avatar.background == "transparent" and back.avatar.lighting == "soft"
    chain = back.chain()
    assert chain.expressions == {"custom": {"tongueOut": 0.5}} and chain.fusion.audio_mix == pytest.approx(0.8)
    assert chain.fusion.smoothing is False  # smoothing is the tuner's, per region
    with pytest.raises(InputError, match="not found"):
        load_settings_file(tmp_path / "none.json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="not an avatar_app studio settings file"):
        load_settings_file(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(InputError, match="Cannot read"):
        load_settings_file(tmp_path / "broken.json")
    # a damaged field takes its default, the rest is kept
    data = json.loads(path.read_text())
    data["avatar"]["lighting"] = "disco"
    (tmp_path / "damaged.json").write_text(json.dumps(data))
    d = load_settings_file(tmp_path / "damaged.json")
    assert d.avatar.lighting == "studio" and d.avatar.background == "transparent"


def test_render_without_settings_uses_a_fresh_studios_look():
    """render's default post-processing is a fresh studio's (mirror on, the panels' default smoothing)."""
    from avatar_app.cli import _render_options, build_parser

    opts = _render_options(build_parser().parse_args(["render", "in.mp4", "-o", "out.mp4"]))
    fresh = StudioSettings().chain()
    assert opts.settings.tuning.mirror is True
    assert opts.settings.tuning.smoothing == fresh.tuning.smoothing
    assert opts.settings.fusion == fresh.fusion and opts.background == (0, 177, 64) and opts.lighting == "studio"


HEADLESS = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.pipeline.session import StudioSession
    from avatar_app.pipeline.settings import MemoryStore

    store = MemoryStore()
    session = StudioSession(store, engines=EngineController(models={"face_recon": None, "speech2face": None}))
    heard = {"changed": [], "states": 0, "failed": []}
    session.events.source_changed.connect(lambda info: heard["changed"].append(info.label))
    session.events.source_failed.connect(lambda info, none: heard["failed"].append(info.error))
    session.events.state.connect(lambda st: heard.__setitem__("states", heard["states"] + 1))
    session.start(source=Path(sys.argv[1]))
    assert session.open_file(Path(sys.argv[2])) is False and heard["failed"], heard
    assert session.pipeline is not None and session.pipeline.running  # the failed file left it playing
    t0 = time.monotonic()
    while heard["states"] < 15 and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    assert heard["states"] >= 15, heard
    t = session.chain.tuner.settings
    t.mirror = False
    session.set_tuning(t)
    assert session.calibrate_neutral() in (True, False)
    session.tick()
    assert not any(m.startswith("PySide6") for m in sys.modules), "the session imported Qt"
    session.close()
    assert session.pipeline is None
    left = [th.name for th in threading.enumerate() if th is not threading.main_thread() and th.is_alive()
            and not isinstance(th, threading._DummyThread) and not th.daemon]
    assert not left, left
    assert '"mirror": false' in store.values["studio/TuningSettings"]
    print("OK", heard["changed"][0], heard["states"])
""")


def test_a_headless_session_plays_a_file_without_qt(tmp_path, testdata):
    """The session drives sources, the live pipeline and the settings with no Qt in the process."""
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 100)
    env_script = tmp_path / "headless.py"
    env_script.write_text(HEADLESS)
    env = {**os.environ, "AVATAR_APP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(env_script), str(testdata / VIDEO), str(bad)], capture_output=True,
                       text=True, timeout=240, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK File: grid_s1_bbaf2n.mp4" in r.stdout


def test_studio_engine_builds_are_paced_by_the_background_policy(monkeypatch):
    """The studio's engine manager paces its build children (half a core by default) unless children
    run at normal priority (the suite's setting) or AVATAR_APP_CHILD_DUTY turns pacing off."""
    from avatar_app.pipeline.engines import EngineController

    monkeypatch.delenv("AVATAR_APP_CHILD_PRIORITY", raising=False)
    monkeypatch.delenv("AVATAR_APP_CHILD_DUTY", raising=False)
    none = {"face_recon": None, "speech2face": None}
    expected = 0.5 if hasattr(__import__("signal"), "SIGSTOP") and os.path.isdir("/proc/self") else None
    assert EngineController(models=none).manager.child_duty == expected
    monkeypatch.setenv("AVATAR_APP_CHILD_DUTY", "1")
    assert EngineController(models=none).manager.child_duty is None
    monkeypatch.delenv("AVATAR_APP_CHILD_DUTY")
    monkeypatch.setenv("AVATAR_APP_CHILD_PRIORITY", "normal")
    assert EngineController(models=none).manager.child_duty is None


def test_the_face_path_is_a_persisted_session_setting(tmp_path, monkeypatch):
    """Headless (no Qt, no pipeline): set_face_path persists the choice in the store, the next session reads
    it, a value that is not a face path is refused and leaves the choice as it was (issue 17)."""
    from avatar_app.core.errors import InputError
    from avatar_app.pipeline import stages
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.pipeline.session import StudioSession

    session = _session(tmp_path, monkeypatch)
    monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", False)
    try:
        assert session.settings.engines.face == "default" and session.face_path == "solver"
        heard: list[str] = []
        session.events.engine_changed.connect(heard.append)
        assert session.set_face_path("engine") is None  # no pipeline: the next one is built with it
        assert session.face_path == "engine" and "face_recon" in heard
        assert session.describe_face() == "geometric solver (the learned engine's model is not installed)"
        with pytest.raises(InputError, match="is not one of default, solver, engine"):
            session.set_face_path("learned")
        assert session.settings.engines.face == "engine"
        store = session.store
    finally:
        session.close()
    again = StudioSession(store, engines=EngineController(models={"face_recon": None, "speech2face": None}))
    try:
        assert again.settings.engines.face == "engine" and again.face_path == "engine"
        monkeypatch.setattr(stages, "FACE_ENGINE_BY_DEFAULT", True)
        again.set_face_path("default")
        assert again.face_path == "engine"  # default follows the constant
    finally:
        again.close()
