"""Packaging helpers (fast): notices generator, icons, .desktop entry, spec, screenshot check."""
from __future__ import annotations

import configparser
import importlib.util
import struct
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "packaging"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_pkg_{name}", PKG / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def make_notices():
    return _load("make_notices")


def test_notices_list_chosen_dists_with_their_licence_texts(make_notices, tmp_path):
    out = make_notices.write_notices(tmp_path / "N.txt", ["numpy", "av", "no-such-dist-xyz"])
    text = out.read_text(encoding="utf-8")
    import av
    import numpy

    assert f"numpy {numpy.__version__}" in text and f"av {av.__version__}" in text
    assert "no-such-dist-xyz" not in text
    assert "NumPy Developers" in text  # numpy's own LICENSE.txt, copied
    assert "libx264" in text and "GNU General Public License" in text
    assert "synthetic data" in text and "not shipped" in text
    assert "Python (CPython)" in text


def test_runtime_closure_follows_dependencies_not_extras(make_notices):
    names = {make_notices._norm(n) for n in make_notices.runtime_closure()}
    assert {"avatar-app", "mediapipe", "numpy", "onnxruntime", "av", "pyside6-essentials"} <= names
    assert "pytest" not in names and "pyinstaller" not in names  # test extra only


def test_dists_for_modules_maps_import_names(make_notices):
    dists = make_notices.dists_for_modules({"cv2", "PySide6", "not_a_module_xyz"})
    assert any("opencv" in d.lower() for d in dists)
    assert any(d.lower().startswith("pyside6") for d in dists)
    assert len(dists) == 2


def test_icons_render_at_every_size(tmp_path):
    make_icons = _load("make_icons")
    written = make_icons.make_icons(tmp_path)
    from PySide6.QtGui import QImage

    for size in make_icons.SIZES:
        img = QImage(str(tmp_path / f"avatar-app-{size}.png"))
        assert (img.width(), img.height()) == (size, size)
        alpha = np.array([img.pixelColor(x, y).alpha() for x in range(0, size, max(1, size // 8))
                          for y in range(0, size, max(1, size // 8))])
        assert alpha.max() == 255 and alpha.min() == 0  # opaque tile, transparent corners
    ico = (tmp_path / "avatar-app.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", ico)
    assert (reserved, kind, count) == (0, 1, len(make_icons.ICO_SIZES))
    assert ico[6 + 16 * count: 6 + 16 * count + 8] == b"\x89PNG\r\n\x1a\n"
    assert len(written) == len(make_icons.SIZES) + 1


def test_shipped_icons_exist_in_every_size():
    from PySide6.QtGui import QImage

    for size in (16, 32, 48, 64, 128, 256, 512):
        img = QImage(str(PKG / "icons" / f"avatar-app-{size}.png"))
        assert (img.width(), img.height()) == (size, size)
    assert (PKG / "icons" / "avatar-app.svg").read_text().lstrip().startswith("<?xml")


def test_desktop_entry_runs_the_console_script():
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read(PKG / "linux" / "avatar-app.desktop")
    entry = cp["Desktop Entry"]
    with open(ROOT / "pyproject.toml", "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert entry["Type"] == "Application"
    assert entry["Exec"].split()[0] in scripts
    assert entry["Icon"] == "avatar-app" and (PKG / "icons" / "avatar-app.svg").is_file()
    assert entry["Categories"].endswith(";")


def test_spec_is_valid_python():
    compile((PKG / "avatar_app.spec").read_text(), "avatar_app.spec", "exec")
    compile((PKG / "entry.py").read_text(), "entry.py", "exec")


def test_avatar_visible_check_can_fail():
    from tests.helpers import CHROMA_RGB, avatar_visible

    h, w = 400, 600
    screen = np.zeros((h, w, 3), np.uint8)
    assert not avatar_visible(screen)[0]  # black: no viewport
    screen[:, :400] = CHROMA_RGB
    assert not avatar_visible(screen)[0]  # empty viewport
    yy, xx = np.mgrid[:h, :400]
    disc = (yy - 200) ** 2 + (xx - 200) ** 2 < 120 ** 2
    # a lit sphere: brightness falls off from the upper left
    light = 1.0 - np.hypot(yy[disc] - 140, xx[disc] - 140) / 300.0
    screen[:, :400][disc] = (np.array([255, 205, 170]) * light[:, None]).astype(np.uint8)
    ok, text = avatar_visible(screen)
    assert ok, text
    flat = np.zeros_like(screen)
    flat[:, :400] = CHROMA_RGB
    flat[:, :400][disc] = (250, 200, 170)
    assert not avatar_visible(flat)[0]  # one flat colour is not a shaded head


def test_setup_lists_every_package_of_the_source_tree():
    """setup.py's package list covers every code package and data folder (else it is missing from the wheel)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("avatar_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    listed = set(mod.package_list())
    assert {"avatar_app.assets", "avatar_app.models", "avatar_app.assets.shaders"} <= listed
    on_disk = {
        ".".join(d.relative_to(ROOT).parts)
        for d in (ROOT / "avatar_app").rglob("*")
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))
    } | {"avatar_app"}
    missing = sorted(on_disk - listed)
    assert not missing, f"setup.py does not package: {missing}"
