"""Shared fixtures: the real test recordings, the studio window's fixtures, the engine layer's,
and two checks on every test: no thread left running, no Qt warning."""
from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import write_all
from ui_helpers import VIEW_SIZE, StillSource, show_running, state_with

ROOT = Path(__file__).resolve().parents[1]


def _testdata_path() -> Path:
    """$AVATAR_TESTDATA, else ../shared/testdata beside the checkout (or beside the main checkout of a
    git worktree, whose .git file points there)."""
    if os.environ.get("AVATAR_TESTDATA"):
        return Path(os.environ["AVATAR_TESTDATA"])
    candidates = [ROOT.parent / "shared" / "testdata"]
    git = ROOT / ".git"
    if git.is_file() and git.read_text().startswith("gitdir:"):
        common = Path(git.read_text().split(":", 1)[1].strip()).parents[1]  # <main>/.git/worktrees/<name>
        candidates.append(common.parent.parent / "shared" / "testdata")
    return next((c for c in candidates if c.is_dir()), candidates[0])


TESTDATA = _testdata_path()


_WORKER_XVFB: subprocess.Popen | None = None


#: The app's own user folders (avatar_app.inference.dirs) and matplotlib's: no test writes into the
#: real ones (~/.cache/avatar-app, ~/.local/share/avatar-app, ~/.config); a variable already set is kept.
_USER_DIR_VARS = ("AVATAR_APP_CACHE_DIR", "AVATAR_APP_DATA_DIR", "XDG_CONFIG_HOME", "MPLCONFIGDIR")
_OWN_USER_DIRS: str | None = None


def _isolate_user_dirs() -> None:
    """Point the variables of :data:`_USER_DIR_VARS` that are unset at one temporary folder per run.

    Set before collection in the first pytest process, so the xdist workers and every subprocess
    (``run_cli``, the window's screenshot runs) inherit them; the engine cache is then shared by the
    run's tests and starts cold (a test that wants its own still sets the variable itself).
    """
    global _OWN_USER_DIRS
    missing = [v for v in _USER_DIR_VARS if not os.environ.get(v)]
    if not missing:
        return
    import tempfile

    _OWN_USER_DIRS = tempfile.mkdtemp(prefix="avatar-app-test-home-")
    for var in missing:
        os.environ[var] = str(Path(_OWN_USER_DIRS) / var.lower())


def pytest_sessionstart(session):
    """Send pytest-rerunfailures' per-test status messages at once (TCP_NODELAY) in xdist workers.

    Under ``-n 2 --reruns`` each worker talks to the controller's status database over a
    loopback TCP socket (pytest-rerunfailures 16.7, ``ClientStatusDB``): per test a "set" with
    no reply, then a "get". With Nagle's algorithm on, the "get" waits for the ACK of the "set",
    which the controller delays (Linux's delayed ACK, 40 ms): 40 ms per test, about 20 s of the
    suite's wall time here (412 small tests: 9.0 s with -n 2, 19.4 s with --reruns added, 9 s
    again with this). Nothing else of the plugin changes.
    """
    import socket

    sock = getattr(getattr(session.config, "failures_db", None), "sock", None)
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # not connected (the controller's listening socket is fine either way)
            pass


def pytest_configure(config):
    """No test writes into the user's own folders (:func:`_isolate_user_dirs`); under pytest-xdist,
    give each worker its own Xvfb display.

    Workers that share one X server (``xvfb-run ... pytest -n 2``) take window activation
    from each other; shortcut tests then press keys into a window that is no longer the
    active one, as if another app had been clicked. A private display per worker (Xvfb
    picks a free number, ``-displayfd``) keeps each worker's windows to itself. Without
    Xvfb on the PATH, or outside xdist, the display given to pytest is used as before.
    """
    global _WORKER_XVFB
    _isolate_user_dirs()
    # Engine-build children at the parent's priority: at SCHED_IDLE (the app's default) they get
    # next to no CPU while the other xdist worker keeps the cores busy, and a build's wait would
    # depend on the load (test_inference_isolation checks the default itself).
    os.environ.setdefault("AVATAR_APP_CHILD_PRIORITY", "normal")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("DISPLAY") or not shutil.which("Xvfb"):
        return
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1920x1080x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number.isdigit():  # Xvfb did not start: keep the shared display
        proc.kill()
        return
    _WORKER_XVFB = proc
    os.environ["DISPLAY"] = f":{number}"


def pytest_unconfigure(config):
    """Stop the worker's own Xvfb and remove the run's user folders (see :func:`pytest_configure`)."""
    if _WORKER_XVFB is not None:
        _WORKER_XVFB.terminate()
        _WORKER_XVFB.wait(timeout=10)
    if _OWN_USER_DIRS is not None:
        shutil.rmtree(_OWN_USER_DIRS, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Modules holding a ``slow`` test run first, the rest after them.

    A stable sort: each module's tests stay together and in their order, so ``-n 0`` sets each
    module fixture up once too. Under ``-n 2`` the long tests then start while the other worker
    has work left, instead of making a long tail at the end of the run.
    """
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


@functools.cache
def _module_fixture_users(path: Path) -> frozenset[str]:
    """Names of the test functions of ``path`` that use one of its module-scoped fixtures, directly
    or through another fixture of the module (read from the source: the xdist controller does not
    collect)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return frozenset()
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]

    def scope(fn: ast.FunctionDef) -> str | None:
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and "fixture" in ast.unparse(dec.func):
                return next((ast.literal_eval(k.value) for k in dec.keywords if k.arg == "scope"), "function")
            if "fixture" in ast.unparse(dec):
                return "function"
        return None

    fixtures = {fn.name: fn for fn in funcs if scope(fn)}
    users = {name for name, fn in fixtures.items() if scope(fn) == "module"}
    grew = True
    while grew:  # fixtures of the module that depend on a module-scoped one
        more = {name for name, fn in fixtures.items() if {a.arg for a in fn.args.args} & users} - users
        users |= more
        grew = bool(more)
    return frozenset(fn.name for fn in funcs
                     if fn.name.startswith("test") and {a.arg for a in fn.args.args} & users)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's ``load`` scheduling, except that the tests using a module-scoped fixture of
    their module go to one worker together, so that fixture is set up once, not once per worker
    (test_main_job renders every recording, ~20 s each time). Every other test is its own unit, as
    with ``load``; units are handed out in collection order (see
    :func:`pytest_collection_modifyitems`). Other ``--dist`` modes are left to pytest-xdist.

    (``--dist loadgroup`` with ``xdist_group`` marks would say the same, but pytest-xdist 3.8 tags
    the node ids through an attribute pytest 9 no longer reads.)
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, rest = nodeid.partition("::")
            name = rest.split("::")[-1].split("[")[0]
            return path if name in _module_fixture_users(ROOT / path) else nodeid

    config.option.loadscopereorder = False  # keep the collection order
    return ModuleFixtureScheduling(config, log)


@pytest.fixture(scope="session")
def testdata() -> Path:
    """Path of ../shared/testdata (or $AVATAR_TESTDATA). Fails, never skips, when absent."""
    assert TESTDATA.is_dir(), f"test data not found at {TESTDATA}"
    return TESTDATA


@pytest.fixture(scope="session")
def qapp():
    """The QApplication, created the way the app creates it (PySide6 plugins, OpenGL 3.3 core)."""
    from avatar_app.ui.app import create_app

    return create_app()


@pytest.fixture(scope="session", autouse=True)
def _qt_platform_first():
    """Start Qt's platform integration (first widget shown) before any test makes an EGL context.

    Under xdist a worker that had created headless EGL contexts (render tests) and only
    later created its first QWidget sometimes aborted inside QMainWindow(); starting Qt
    first in every worker (when a display exists) keeps the initialisation order the
    app itself has.
    """
    if not os.environ.get("DISPLAY"):
        yield
        return
    from avatar_app.ui.app import create_app

    app = create_app()
    from PySide6.QtWidgets import QWidget

    w = QWidget()
    w.resize(16, 16)
    w.show()
    app.processEvents()
    w.close()
    w.deleteLater()
    app.processEvents()
    yield


# ----------------------------------------------------------------------------- every test
#: Seconds a test's threads get to finish after its fixtures were torn down.
THREAD_GRACE_S = 5.0


@pytest.fixture(autouse=True)
def _no_threads_left(request):
    """Fail a test that leaves threads running (napari's dangling-thread check), naming them.

    Threads that existed before the test are ignored, and so are foreign threads that
    merely called into Python (``threading._DummyThread``). A test that starts a thread
    on purpose for later tests (none does) would mark itself ``allow_threads``.
    """
    before = set(threading.enumerate())
    yield
    if request.node.get_closest_marker("allow_threads"):
        return
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()
                and not isinstance(t, threading._DummyThread)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        pytest.fail(f"the test left {len(left)} thread(s) running: {', '.join(sorted(t.name for t in left))}",
                    pytrace=False)


# ----------------------------------------------------------------------------- studio window
@pytest.fixture
def settings(tmp_path):
    """A fresh QSettings in a temporary INI file, recordings into tmp_path/recordings."""
    from PySide6.QtCore import QSettings

    s = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    s.setValue("record_folder", str(tmp_path / "recordings"))
    return s



@pytest.fixture(scope="session")
def head_images() -> dict[str, np.ndarray]:
    """BGR 640x480 renders of the default head: "neutral" and "smile_left" (mouthSmileLeft = 1).

    Rendered with flat light on grey so the face tracker sees them like a camera would;
    the subject's left mouth corner is on the image's RIGHT (a non-mirrored camera view).
    """
    from avatar_app.render.headless import HeadlessRenderer

    out = {}
    with HeadlessRenderer(640, 480, background=(90, 90, 90), lighting="flat") as r:
        for name, kw in (("neutral", {}), ("smile_left", {"mouthSmileLeft": 1.0})):
            out[name] = np.ascontiguousarray(r.render(state_with(**kw))[:, :, ::-1])
    return out



@pytest.fixture
def still_window(qtbot, settings, monkeypatch, head_images):
    """The studio window on a StillSource "camera" showing the neutral head, no microphone."""
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    import avatar_app.ui.devices as devices_mod
    from avatar_app.core.errors import CaptureError
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    source = StillSource(head_images["neutral"])

    def no_mic(*a, **k):
        raise CaptureError("No microphone in this test.")

    monkeypatch.setattr(mic_mod, "MicSource", no_mic)
    monkeypatch.setattr(camera_mod, "CameraSource", lambda index, **k: source)
    monkeypatch.setattr(devices_mod, "list_camera_devices",
                        lambda probe=True: ([devices_mod.CameraDevice("test-still", "Still test camera", 0)], "test"))
    # the geometric solver, whatever models are installed: the tests check the window, not a model
    engines = EngineController(models={"face_recon": None, "speech2face": None})
    win = MainWindow(camera=0, settings=settings, engines=engines)
    win.still_source = source
    show_running(qtbot, win, VIEW_SIZE)
    yield win
    win.close()



@pytest.fixture
def no_face_video(tmp_path) -> Path:
    """A 3 s 320x240 25 fps FFmpeg test pattern (no face, no audio track) in tmp_path."""
    import subprocess

    path = tmp_path / "testsrc.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-t", "3",
                    "-pix_fmt", "yuv420p", str(path)], check=True)
    return path


# ----------------------------------------------------------------------------- engine layer
@pytest.fixture(scope="session")
def short_grid_clip(tmp_path_factory, testdata) -> Path:
    """The first 0.4 s of grid_s1_bbaf2n.mp4 (H.264 + AAC), made once per session for quick renders."""
    clip = tmp_path_factory.mktemp("short_grid") / "short.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(testdata / "video" / "grid_s1_bbaf2n.mp4"), "-t", "0.4",
                    "-c:v", "libx264", "-c:a", "aac", str(clip)], check=True)
    return clip


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """name -> .onnx path of every tiny model, with .val.npz/.calib.npz beside each."""
    return write_all(tmp_path_factory.mktemp("tiny_models"))



@pytest.fixture(scope="session")
def face_recon_engine_cache(tmp_path_factory) -> Path:
    """One engine-cache folder per test process for the modules that build the shipped face_recon's
    reduced-precision engines (tests/reconstruction/test_face_recon_engine.py and _real.py): an
    entry is keyed by the ONNX file's sha256, precision, backend and its version, device and
    options (avatar_app/inference/cache.py), so the second module opens the engine the first built
    and verified instead of building it again."""
    return tmp_path_factory.mktemp("face_recon_engines")


@pytest.fixture
def user_dirs(tmp_path, monkeypatch) -> Path:
    """Point the user cache and data directories at a fresh temporary folder."""
    monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AVATAR_APP_DATA_DIR", str(tmp_path / "data"))
    return tmp_path



@pytest.fixture
def manager(user_dirs):
    """An in-process EngineManager on a fresh cache (no child processes: fast)."""
    from avatar_app.inference.cache import EngineCache
    from avatar_app.inference.manager import EngineManager

    return EngineManager(cache=EngineCache(user_dirs / "cache"), isolate=False)


# ----------------------------------------------------------------------------- one window per module
def _wait_until(condition, timeout_s: float, what: str) -> None:
    """Process Qt events until ``condition()`` is true; fails naming ``what`` after ``timeout_s`` s
    (qtbot.waitUntil for module-scoped fixtures, which cannot use the function-scoped qtbot)."""
    from PySide6.QtTest import QTest

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}", pytrace=False)
        QTest.qWait(10)


@pytest.fixture(scope="module")
def shared_window(qapp, tmp_path_factory):
    """A factory for ONE studio window shared by the tests of a module that each leave it as they found
    it (a window costs 1-3 s to start); the tests that change it for good keep their own window.

    ``shared_window(make, size=None, window_size=None)`` calls ``make(settings)`` (``settings``: a QSettings
    in a temporary INI file, recordings in a temporary folder) for the MainWindow, shows it (the viewport
    fixed at ``size`` pixels, the window resized to ``window_size`` (w, h) pixels, when given), waits until
    its pipeline processed 5 frames and returns it; the module's later calls return the same window. At
    the module's end the window is closed and its threads must have stopped (as :func:`_no_threads_left`
    checks for a test's own windows). The window runs until the module ends: put its tests last.
    """
    from PySide6.QtCore import QSettings

    made: dict = {}
    before = set(threading.enumerate())

    def get(make, size=None, window_size=None):
        if "win" not in made:
            folder = tmp_path_factory.mktemp("shared_window")
            s = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
            s.setValue("record_folder", str(folder / "recordings"))
            win = made["win"] = make(s)
            if size is not None:
                win.viewport.setFixedSize(*size)
            win.show()
            _wait_until(lambda: win.windowHandle() is not None and win.windowHandle().isExposed(), 30,
                        "the shared window to be exposed")
            if window_size is not None:
                win.resize(*window_size)
                _wait_until(lambda: win.size().toTuple() == tuple(window_size), 30,
                            f"the shared window to be resized to {window_size}")
            _wait_until(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 5,
                        60, "the shared window's pipeline to process 5 frames")
        return made["win"]

    yield get
    if "win" in made:
        made["win"].close()
        made["win"].deleteLater()
        qapp.processEvents()
    deadline = time.monotonic() + THREAD_GRACE_S
    started = [t for t in threading.enumerate() if t not in before and not isinstance(t, threading._DummyThread)]
    for t in started:  # each gets what is left of the grace time
        t.join(max(0.0, deadline - time.monotonic()))
    names = sorted(t.name for t in started if t.is_alive())
    if names:
        pytest.fail(f"the shared window left {len(names)} thread(s) running: {', '.join(names)}", pytrace=False)


@pytest.fixture(scope="module")
def shared_still_window(shared_window, head_images):
    """:func:`still_window` made once per module (:func:`shared_window`): the tests using it leave it as
    they found it. The same stand-ins: a StillSource "camera" with the neutral head, no microphone, the
    geometric solver."""
    import avatar_app.capture.camera as camera_mod
    import avatar_app.capture.mic as mic_mod
    import avatar_app.ui.devices as devices_mod
    from avatar_app.core.errors import CaptureError
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    source = StillSource(head_images["neutral"])

    def no_mic(*a, **k):
        raise CaptureError("No microphone in this test.")

    def make(settings):
        win = MainWindow(camera=0, settings=settings, engines=EngineController(models={"face_recon": None,
                                                                                      "speech2face": None}))
        win.still_source = source
        return win

    with pytest.MonkeyPatch.context() as mp:  # the stand-ins stay while the window lives
        mp.setattr(mic_mod, "MicSource", no_mic)
        mp.setattr(camera_mod, "CameraSource", lambda index, **k: source)
        mp.setattr(devices_mod, "list_camera_devices",
                   lambda probe=True: ([devices_mod.CameraDevice("test-still", "Still test camera", 0)], "test"))
        yield shared_window(make, VIEW_SIZE)
