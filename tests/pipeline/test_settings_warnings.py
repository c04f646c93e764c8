"""Invalid values in a settings file are named, not silently replaced (issue 21, trial fixes 3)."""
from __future__ import annotations

import json

from avatar_app import cli
from avatar_app.pipeline.settings import StudioSettings, load_settings_file, save_settings_file

#: (dotted key, how to set it in the file's JSON, the value) of each case the trial found.
BAD = (("schema", lambda d: d.__setitem__("schema", 99), "99"),
       ("tuning.smoothing.mouth", lambda d: d["tuning"]["smoothing"].__setitem__("mouth", "abc"), "'abc'"),
       ("tuning.sensitivity.noSuchShape", lambda d: d["tuning"]["sensitivity"].__setitem__("noSuchShape", 2.0),
        "2.0"),
       ("fusion.audio_mix", lambda d: d["fusion"].__setitem__("audio_mix", 5), "5"),
       ("avatar.msaa", lambda d: d["avatar"].__setitem__("msaa", 3), "3"))


def _bad_file(tmp_path):
    path = save_settings_file(tmp_path / "s.json", StudioSettings())
    data = json.loads(path.read_text())
    for _key, edit, _value in BAD:
        edit(data)
    path.write_text(json.dumps(data))
    return path


def test_each_rejected_key_and_value_is_reported(tmp_path):
    report: list[str] = []
    s = load_settings_file(_bad_file(tmp_path), report)
    for key, _edit, value in BAD:
        assert any(line.startswith(f"{key}: {value} ") for line in report), (key, report)
    assert s.fusion.audio_mix == 0.5 and s.avatar.msaa == 0  # the defaults, and said so
    assert any("out of range" in line or "0..1" in line for line in report if line.startswith("fusion.audio_mix"))
    assert len(report) == len(BAD)


def test_a_valid_file_reports_nothing(tmp_path):
    report: list[str] = []
    load_settings_file(save_settings_file(tmp_path / "ok.json", StudioSettings()), report)
    assert report == []


def test_render_warns_on_stderr_and_exits_0(tmp_path, short_grid_clip):
    """In process (``run_main``: what the render writes and returns, not the interpreter's exit, which
    tests/cli's ``run_cli`` tests cover), on conftest's 0.4 s ``short_grid_clip``."""
    from tests.helpers import run_main

    r = run_main("render", str(short_grid_clip), "-o", str(tmp_path / "out.mp4"),
                 "--settings", str(_bad_file(tmp_path)), "--size", "96x64", "-q")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    for key, _edit, value in BAD:
        assert any(f": {key}: {value} " in line for line in warnings), (key, r.stderr)


def test_malformed_json_still_exits_2(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    assert cli.main(["render", str(tmp_path / "missing_is_not_reached.mp4"), "-o", str(tmp_path / "o.mp4"),
                     "--settings", str(bad)]) == 2
    assert "broken.json" in capsys.readouterr().err


#: The second trial's cases: values the first round of checks let through.
BAD_2 = (("extra_key", lambda d: d.__setitem__("extra_key", 1), "1", None),
         ("output.format", lambda d: d["output"].__setitem__("format", "gif"), "'gif'", "h264-mp4"),
         ("expressions.hotkeys.happy", lambda d: d["expressions"]["hotkeys"].__setitem__("happy", "Ctrl+Alt+Q+Z"),
          "'Ctrl+Alt+Q+Z'", "F5"),
         ("expressions.custom", lambda d: d["expressions"].__setitem__("custom", "foo=bar, jawOpen=7"),
          "'foo=bar, jawOpen=7'", StudioSettings().expressions.custom))


def test_unknown_areas_formats_hotkeys_and_custom_mixes_are_rejected(tmp_path):
    path = save_settings_file(tmp_path / "s.json", StudioSettings())
    data = json.loads(path.read_text())
    for _key, edit, _value, _used in BAD_2:
        edit(data)
    data["avatar"]["msaa"] = 1e9
    path.write_text(json.dumps(data))
    report: list[str] = []
    s = load_settings_file(path, report)
    for key, _edit, value, used in BAD_2:
        line = next((x for x in report if x.startswith(f"{key}: {value} ")), None)
        assert line is not None, (key, report)
        assert (f"; using {used!r}" in line) if used is not None else "using" not in line, line
    assert "avatar.msaa: 1000000000.0 is not an integer; using 0" in report
    assert s.output.format == "h264-mp4" and s.expressions.hotkeys["happy"] == "F5"
    assert s.expressions.custom == StudioSettings().expressions.custom and s.custom_mix()  # F9 still works
    assert not any("the default" in x or " a int" in x for x in report), report


def test_key_sequences():
    from avatar_app.pipeline.settings import key_sequence_ok

    for ok in ("", "F5", "Ctrl+F8", "Ctrl+Shift+A", "Ctrl++", "Meta+Alt+1"):
        assert key_sequence_ok(ok), ok
    for bad in ("Ctrl+Alt+Q+Z", "Ctrl+", "Shift", "Ctrl+Ctrl+A", "Hyper+A", "NotAKey", "Ctrl+F36", "F0"):
        assert not key_sequence_ok(bad), bad
    for ok in ("Ctrl+Space", "PgUp", "F35", "Alt+Return"):
        assert key_sequence_ok(ok), ok


def test_an_unknown_tuning_key_is_named(tmp_path):
    path = save_settings_file(tmp_path / "s.json", StudioSettings())
    data = json.loads(path.read_text())
    data["tuning"]["bogus"] = 1
    path.write_text(json.dumps(data))
    report: list[str] = []
    load_settings_file(path, report)
    assert any(x.startswith("tuning.bogus: 1 is not a setting") for x in report), report


def test_settings_file_errors_name_the_folder_or_the_file_in_the_way(tmp_path):
    import pytest

    from avatar_app.core.errors import InputError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match=r"afile is a file, not a folder"):
        save_settings_file(tmp_path / "afile" / "s.json", StudioSettings())
    with pytest.raises(InputError, match=r"it is a folder$"):
        save_settings_file(tmp_path, StudioSettings())
    with pytest.raises(InputError, match=r"it is a folder$"):
        load_settings_file(tmp_path)


def test_render_uses_the_default_head_when_the_settings_avatar_is_missing(tmp_path, short_grid_clip):
    """In process (``run_main``, as :func:`test_render_warns_on_stderr_and_exits_0`)."""
    clip = short_grid_clip
    s = StudioSettings()
    s.avatar.path = str(tmp_path / "elsewhere" / "robot.vrm")  # exported on another PC
    settings = save_settings_file(tmp_path / "s.json", s)
    from tests.helpers import run_main

    r = run_main("render", str(clip), "-o", str(tmp_path / "out.mp4"), "--settings", str(settings),
                 "--size", "96x64", "-q")
    assert r.returncode == 0, r.stderr
    assert "robot.vrm" in r.stderr and "default head" in r.stderr, r.stderr
    assert (tmp_path / "out.mp4").stat().st_size > 1000


def test_a_broken_settings_avatar_is_a_warning_but_a_broken_avatar_option_an_error(tmp_path, short_grid_clip):
    """As a missing one (above): the file's value is rejected and named, the default head used, exit 0;
    the same file given as --avatar is the user's explicit choice: exit 2 (second trial, ninth session)."""
    from tests.helpers import run_main

    bad = tmp_path / "bad.glb"
    bad.write_text("not a model")
    s = StudioSettings()
    s.avatar.path = str(bad)
    settings = save_settings_file(tmp_path / "s.json", s)
    r = run_main("render", str(short_grid_clip), "-o", str(tmp_path / "out.mp4"), "--settings", str(settings),
                 "--size", "96x64", "-q")
    assert r.returncode == 0, r.stderr
    assert "avatar.path" in r.stderr and "bad.glb" in r.stderr and "default head" in r.stderr, r.stderr
    r = run_main("render", str(short_grid_clip), "-o", str(tmp_path / "out2.mp4"), "--avatar", str(bad),
                 "--size", "96x64", "-q")
    assert r.returncode == 2 and "bad.glb" in r.stderr, r.stderr


#: Per-engine choices (Engines panel) a user could write into the file: each is named and falls back.
BAD_ENGINES = {"face_recon": {"backend": "cuda13", "precision": "fp8"}, "speech2face": "fast",
               "nosuch": {"backend": "auto"}}


def test_bad_engine_choices_are_named_and_fall_back_to_auto(tmp_path, capsys):
    from avatar_app.pipeline.engines import BACKEND_LABELS, PRECISIONS, EngineController
    from avatar_app.pipeline.settings import SCHEMA_VERSION, MemoryStore

    path = save_settings_file(tmp_path / "s.json", StudioSettings())
    data = json.loads(path.read_text())
    data["engines"]["choices"] = BAD_ENGINES
    path.write_text(json.dumps(data))
    report: list[str] = []
    s = load_settings_file(path, report)
    lines = {line.split(":")[0]: line for line in report}
    assert set(lines) == {"engines.choices.face_recon.backend", "engines.choices.face_recon.precision",
                          "engines.choices.speech2face", "engines.choices.nosuch"}, report
    backend = lines["engines.choices.face_recon.backend"]
    assert "'cuda13'" in backend and all(b in backend for b in BACKEND_LABELS) and "using 'auto'" in backend
    precision = lines["engines.choices.face_recon.precision"]
    assert "'fp8'" in precision and all(p in precision for p in PRECISIONS) and "default" in precision
    assert "'fast'" in lines["engines.choices.speech2face"]
    assert "not an engine" in lines["engines.choices.nosuch"] and "face_recon" in lines["engines.choices.nosuch"]
    auto = {"backend": "auto", "precision": None}
    assert s.engines.choices == {"face_recon": auto, "speech2face": auto}

    # the studio's own store with the same values: the engines start with Auto instead of crashing
    store = MemoryStore({"studio/EngineChoice": json.dumps({"schema": SCHEMA_VERSION, "choices": BAD_ENGINES})})
    choices = StudioSettings.load(store).engines.choices
    ctl = EngineController(models={"face_recon": None, "speech2face": None})
    try:
        ctl.start(choices).result(timeout=60)
    finally:
        ctl.close()
    assert {n: e.choice for n, e in ctl.entries.items()} == {n: ("auto", None) for n in ("face_recon", "speech2face")}

    # render --settings names the file, the key, the value and the allowed values
    assert cli.main(["render", str(tmp_path / "missing_is_not_reached.mp4"), "-o", str(tmp_path / "o.mp4"),
                     "--settings", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"warning: {path}: engines.choices.face_recon.backend: 'cuda13' is not one of auto, " in err, err


def test_valid_engine_choices_are_kept(tmp_path):
    s = StudioSettings()
    s.engines.choices = {"face_recon": {"backend": "ort_cpu", "precision": "fp16"},
                         "speech2face": {"backend": "tensorrt", "precision": None}}
    report: list[str] = []
    back = load_settings_file(save_settings_file(tmp_path / "ok.json", s), report)
    assert report == [] and back.engines.choices == s.engines.choices
