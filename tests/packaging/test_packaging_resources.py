"""avatar_app.resources.resource_path in the three layouts: source tree, installed wheel, frozen bundle."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from avatar_app import resources
from avatar_app.resources import resource_path

ROOT = Path(__file__).resolve().parents[2]


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A site-packages folder with avatar_app/ installed like the wheel installs it."""
    site = tmp_path / "site-packages"
    pkg = site / "avatar_app"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(resources, "_PKG_DIR", pkg)
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    return site


def test_source_tree_finds_the_repository_assets():
    shader = resource_path("assets/shaders/avatar.vert")
    assert shader == ROOT / "assets" / "shaders" / "avatar.vert"
    assert shader.is_file()


def test_wheel_layout_is_found_inside_the_package(fake_wheel):
    inside = _touch(fake_wheel / "avatar_app" / "models" / "face_recon.onnx")
    assert resource_path("models/face_recon.onnx") == inside
    assert resource_path(Path("models") / "face_recon.onnx") == inside


def test_wheel_layout_ignores_a_stray_top_level_assets_folder(fake_wheel):
    # another distribution left site-packages/assets/...: never ours
    _touch(fake_wheel / "assets" / "shaders" / "avatar.vert")
    got = resource_path("assets/shaders/avatar.vert")
    assert got == fake_wheel / "avatar_app" / "assets" / "shaders" / "avatar.vert"
    assert not got.exists()


def test_frozen_bundle_prefers_meipass_package_layout(fake_wheel, tmp_path, monkeypatch):
    meipass = tmp_path / "_internal"
    in_bundle = _touch(meipass / "avatar_app" / "assets" / "demo" / "speech.ogg")
    _touch(fake_wheel / "avatar_app" / "assets" / "demo" / "speech.ogg")
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)
    assert resource_path("assets/demo/speech.ogg") == in_bundle


def test_frozen_bundle_accepts_top_level_layout(fake_wheel, tmp_path, monkeypatch):
    meipass = tmp_path / "_internal"
    top = _touch(meipass / "models" / "speech2face.onnx")
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)
    assert resource_path("models/speech2face.onnx") == top


def test_missing_resource_names_the_source_tree_in_a_checkout():
    got = resource_path("models/does_not_exist.onnx")
    assert got == ROOT / "models" / "does_not_exist.onnx"
    assert not got.exists()
