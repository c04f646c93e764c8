"""The installable app: the PyInstaller bundle and the wheel, built and run for real.

Both tests are slow (a bundle build, a fresh venv): ``pytest -m slow tests/packaging/test_packaging.py``.

- The Linux bundle (packaging/avatar_app.spec) is built into a temporary folder;
  the size cuts of packaging/slim.py are in it; its ``avatar-app render`` turns the GRID clip into a valid
  MP4 (video + audio,
  ~3 s); LICENSE and THIRD_PARTY_NOTICES.txt are in it; it builds an INT8
  engine in a spawned child process; its window, started on
  a private Xvfb server with ``--source`` the same clip, shows the avatar
  (screenshot taken from outside the app with Qt's ``QScreen.grabWindow(0)``).
- The wheel made by ``python -m build`` installs into a fresh venv whose
  ``avatar-app render`` makes the same clip, with its data found inside the
  installed package.

One test function per artefact, so pytest-xdist never builds a bundle twice.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import CHROMA_RGB, avatar_visible, decoded_duration, ffprobe_streams  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "packaging" / "avatar_app.spec"
CLIP = "video/grid_s1_bbaf2n.mp4"

GRAB_SCRIPT = r"""
import os, sys
os.environ["QT_QPA_PLATFORM"] = "xcb"
from PySide6.QtGui import QGuiApplication
app = QGuiApplication([])
ok = app.primaryScreen().grabWindow(0).save(sys.argv[1])
sys.exit(0 if ok else 1)
"""


def _project_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["version"]


def _isolated_env(home: Path) -> dict[str, str]:
    """Environment for the app under test: its own config/cache dirs, quiet logging."""
    env = dict(os.environ)
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[var] = str(home / var.lower())
    env.pop("PYTHONPATH", None)  # the bundle / venv must not see the source tree
    env.pop("QT_QPA_PLATFORM", None)
    return env


def _check_clip(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 10_000, f"{path} missing or tiny"
    streams = ffprobe_streams(path)
    assert set(streams) >= {"video", "audio"}, f"streams: {streams}"
    assert streams["video"]["codec_name"] == "h264"
    for kind in ("video", "audio"):
        dur = decoded_duration(path, kind)
        assert 2.7 <= dur <= 3.3, f"{kind} lasts {dur:.2f} s, the input lasts 3 s"


def _load_rgb(png: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB pixels of a PNG (Qt's reader)."""
    from PySide6.QtGui import QImage

    img = QImage(str(png)).convertToFormat(QImage.Format.Format_RGB888)
    assert not img.isNull(), f"cannot read {png}"
    rows = np.frombuffer(img.constBits(), np.uint8).reshape(img.height(), img.bytesPerLine())
    return rows[:, : img.width() * 3].reshape(img.height(), img.width(), 3).copy()


class _Xvfb:
    """A private X server (display number chosen by Xvfb itself) for one test."""

    def __init__(self, size: str = "1280x800x24"):
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(w), "-screen", "0", size, "-nolisten", "tcp", "-noreset"],
            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(w)
        with os.fdopen(r) as fh:
            num = fh.readline().strip()
        assert num.isdigit(), "Xvfb did not report a display number (is the xvfb package installed?)"
        self.display = f":{num}"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _grab(display: str, out: Path) -> np.ndarray:
    env = dict(os.environ, DISPLAY=display)
    subprocess.run([sys.executable, "-c", GRAB_SCRIPT, str(out)], env=env, check=True, timeout=60,
                   capture_output=True)
    return _load_rgb(out)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _bundle_window_shows_avatar(exe: Path, clip: Path, work: Path) -> None:
    xvfb = _Xvfb()
    log_path = work / "window.log"
    try:
        env = _isolated_env(work)
        env["DISPLAY"] = xvfb.display
        with open(log_path, "wb") as log:
            app = subprocess.Popen([str(exe), "--source", str(clip)], cwd=work, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            verdict, text = False, "no screenshot yet"
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not verdict:
                time.sleep(2)
                assert app.poll() is None, (f"bundled window exited with {app.returncode}:\n"
                                            + log_path.read_text(errors="replace")[-3000:])
                verdict, text = avatar_visible(_grab(xvfb.display, work / "screen.png"))
            assert verdict, f"avatar not visible in {work / 'screen.png'}: {text}\n" + log_path.read_text(
                errors="replace")[-3000:]
        finally:
            _stop(app)
    finally:
        xvfb.close()


@pytest.mark.slow
@pytest.mark.build
@pytest.mark.gui
def test_linux_bundle_renders_and_shows_the_avatar(testdata, tmp_path_factory):
    work = tmp_path_factory.mktemp("bundle")
    dist = work / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", str(dist), "--workpath", str(work / "build"), str(SPEC)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert build.returncode == 0, f"PyInstaller failed:\n{build.stdout[-2000:]}\n{build.stderr[-4000:]}"
    app_dir = dist / "avatar-app"
    exe = app_dir / "avatar-app"
    internal = app_dir / "_internal"
    assert exe.is_file() and os.access(exe, os.X_OK)

    # version from pyproject
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120,
                         env=_isolated_env(work))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"avatar-app {_project_version()}"

    # licences and notices, at the top and inside (sys._MEIPASS)
    for folder in (app_dir, internal):
        assert (folder / "LICENSE").read_text().startswith("                    GNU GENERAL PUBLIC LICENSE")
    notices = (app_dir / "THIRD_PARTY_NOTICES.txt").read_text(encoding="utf-8")
    assert (internal / "THIRD_PARTY_NOTICES.txt").read_text(encoding="utf-8") == notices
    for needle in ("GNU General Public License", "libx264", "PySide6", "mediapipe", "onnxruntime", "av ",
                   "opencv", "numpy", "synthetic data", "training/", "Python (CPython)"):
        assert needle in notices, f"THIRD_PARTY_NOTICES.txt does not mention {needle!r}"

    # data in the wheel's layout; MediaPipe's face models; heavy packages left out
    assert (internal / "avatar_app" / "assets" / "shaders").is_dir()
    mp_modules = internal / "mediapipe" / "modules"
    assert (mp_modules / "face_landmark" / "face_landmark_front_cpu.binarypb").is_file()
    assert (mp_modules / "face_landmark" / "face_landmark_with_attention.tflite").is_file()
    assert not (mp_modules / "pose_landmark").exists()
    for heavy in ("torch", "tensorflow", "jax", "jaxlib", "matplotlib", "scipy", "tensorrt_rtx"):
        assert not (internal / heavy).exists(), f"{heavy} should not be bundled"
    assert not (mp_modules / "face_landmark" / "face_landmark.tflite").exists()  # refine_landmarks=False only
    for needed in ("cv2", "onnxruntime", "av", "PySide6/QtOpenGL.abi3.so"):
        assert any(internal.glob(needed + "*")), f"{needed} missing from the bundle"
    # packaging/slim.py's stand-ins (tests/packaging/test_packaging_slim.py checks what they do)
    small = {"PySide6/Qt/lib/libicudata.so.*": 6e6, "av.libs/libx265-*": 1e5, "av.libs/libSvtAv1Enc-*": 1e5,
             "opencv_*.libs/libopenblas*": 1e5}
    for pattern, limit in small.items():
        (lib,) = internal.glob(pattern)
        assert lib.stat().st_size < limit, f"{lib.name}: {lib.stat().st_size} bytes, the slim build was skipped?"
    assert not list(internal.glob("python3.11/lib-dynload/_ssl*")) and not list(internal.glob("libcrypto.so*"))

    # offline render with the bundled CLI
    out_mp4 = work / "out.mp4"
    r = subprocess.run([str(exe), "render", str(testdata / CLIP), "-o", str(out_mp4), "--size", "640x360", "-q"],
                       cwd=work, capture_output=True, text=True, timeout=600, env=_isolated_env(work))
    assert r.returncode == 0, f"bundled render failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    _check_clip(out_mp4)

    # an INT8 engine: a spawned child process (multiprocessing in the frozen app) running
    # onnxruntime.quantization, whose helpers import each other as top-level modules
    from avatar_app.inference.tiny_models import write_tiny_model

    model = write_tiny_model("matmul", work / "tiny")
    r = subprocess.run([str(exe), "engines", "build", "--model", str(model), "--backend", "ort_cpu",
                        "--precision", "int8"], cwd=work, capture_output=True, text=True, timeout=600,
                       env=_isolated_env(work))
    assert r.returncode == 0, f"bundled INT8 engine build failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"

    # the window, on its own X server
    _bundle_window_shows_avatar(exe, testdata / CLIP, work)

    shutil.rmtree(dist, ignore_errors=True)  # ~0.5 GB; kept only when a check failed
    shutil.rmtree(work / "build", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.build
def test_wheel_installs_into_a_fresh_venv_and_renders(testdata, tmp_path):
    # a clean copy of the checkout: the build writes build/ and *.egg-info next to the sources
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "__pycache__", "*.egg-info", ".pytest_cache", "*.pyc", "tmp", "out"))
    wheel_dir = tmp_path / "wheel"
    b = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                        "--outdir", str(wheel_dir), str(src)], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, f"python -m build failed:\n{b.stdout[-2000:]}\n{b.stderr[-3000:]}"
    (wheel,) = wheel_dir.glob("avatar_app-*.whl")
    assert f"-{_project_version()}-" in wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "avatar_app/assets/shaders/avatar.vert" in names
    assert any(n.endswith((".dist-info/licenses/LICENSE", ".dist-info/LICENSE")) for n in names), names[-10:]
    modules = sorted(p.relative_to(src).as_posix() for p in (src / "avatar_app").rglob("*.py"))
    missing = [m for m in modules if m not in names]
    assert not missing, f"source modules not in the wheel (pyproject packages list?): {missing}"
    shipped_models = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "models").rglob("*") if p.is_file())
    missing = [m for m in shipped_models if "avatar_app/" + m not in names]
    assert not missing, f"models not in the wheel: {missing}"

    venv = tmp_path / "venv"
    # a venv without pip of its own (ensurepip cost ~4 s CPU); this pip installs the wheel and its
    # dependencies into it (--python: run by the venv's interpreter, into its site-packages)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--prefer-binary",
                          "--no-compile", str(wheel)], capture_output=True, text=True, timeout=1500)
    assert pip.returncode == 0, f"pip install of the wheel failed:\n{pip.stdout[-2000:]}\n{pip.stderr[-3000:]}"

    run_dir = tmp_path / "run"  # outside the source tree: nothing may come from the checkout
    run_dir.mkdir()
    env = _isolated_env(tmp_path)
    where = subprocess.run(
        [str(py), "-c", "import json, avatar_app; from avatar_app.resources import resource_path as r; "
                        "print(json.dumps([avatar_app.__file__, str(r('assets/shaders/avatar.vert'))]))"],
        cwd=run_dir, capture_output=True, text=True, check=True, env=env, timeout=120,
    )
    pkg_file, shader = json.loads(where.stdout)
    assert Path(pkg_file).is_relative_to(venv) and Path(shader).is_relative_to(venv), where.stdout
    assert Path(shader).is_file()

    out_mp4 = run_dir / "out.mp4"
    r = subprocess.run([str(venv / "bin" / "avatar-app"), "render", str(testdata / CLIP), "-o", str(out_mp4),
                        "--size", "640x360", "-q"], cwd=run_dir, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, f"installed avatar-app render failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    _check_clip(out_mp4)
    shutil.rmtree(venv, ignore_errors=True)
