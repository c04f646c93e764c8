"""Helpers of the studio-window tests (tests/ui/); their fixtures are in conftest.py."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.clock import now_ns
from avatar_app.core.types import AvatarState, Frame

VIEW_SIZE = (640, 360)


def qimage_to_array(img) -> np.ndarray:
    """(H, W, 3) uint8 RGB copy of a QImage."""
    from PySide6.QtGui import QImage

    img = img.convertToFormat(QImage.Format.Format_RGB888)
    w, h = img.width(), img.height()
    arr = np.frombuffer(img.constBits(), np.uint8, count=img.bytesPerLine() * h).reshape(h, img.bytesPerLine())
    return arr[:, : w * 3].reshape(h, w, 3).copy()


def state_with(**weights) -> AvatarState:
    """A neutral AvatarState with some weights set (ARKit names)."""
    st = AvatarState.neutral()
    w = st.weights.copy()
    for k, v in weights.items():
        w[BLENDSHAPE_NAMES.index(k)] = v
    return AvatarState(st.t_capture_ns, 0.0, w, st.rotation, st.translation, st.gaze)


class StillSource:
    """A live source that delivers one (changeable) BGR image at ``fps``, like a camera.

    Attributes:
        image: (H, W, 3) uint8 BGR shown from now on (assign to change it).
    """

    def __init__(self, image: np.ndarray, fps: float = 30.0):
        self.image = image
        self.fps = fps
        self.granted = (image.shape[1], image.shape[0], fps)
        self.error = None
        self.finished = False
        self.dropped = 0
        self._frame: Frame | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name="still-source", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        k = 0
        t0 = time.perf_counter()
        while not self._stop.is_set():
            f = Frame(index=k, t_capture_ns=now_ns(), image=self.image, media_time_s=k / self.fps)
            with self._cond:
                self._frame = f
                self._cond.notify_all()
            k += 1
            delay = t0 + k / self.fps - time.perf_counter()
            if delay > 0:
                self._stop.wait(delay)

    def get_latest(self, timeout_s=1.0):
        with self._cond:
            if self._frame is None:
                self._cond.wait(timeout_s)
            return self._frame

    def stop(self, timeout_s: float = 2.0):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


def wait_frames(qtbot, win, n: int, timeout_ms: int = 20000) -> None:
    """Wait until the pipeline processed ``n`` more frames."""
    start = win.session.pipeline.frames_processed
    qtbot.waitUntil(lambda: win.session.pipeline.frames_processed >= start + n, timeout=timeout_ms)


def grab_view(qtbot, win) -> np.ndarray:
    """The viewport's current frame (RGB) after showing the pipeline's newest state."""
    st = win.session.pipeline.latest_state() if win.session.pipeline is not None else None
    if st is not None:
        win.viewport.show_state(st)
    qtbot.wait(30)
    return qimage_to_array(win.viewport.grabFramebuffer())


def render_state(win, state) -> np.ndarray:
    """Render ``state`` in the window's viewport now and return the picture (RGB).

    The grab renders this state whatever the pipeline thread hands the viewport meanwhile.
    """
    return qimage_to_array(win.viewport.grabFramebuffer(state=state))


def changed_columns(a: np.ndarray, b: np.ndarray, threshold: int = 30) -> np.ndarray:
    """x coordinates of pixels that differ by more than ``threshold`` in any channel."""
    d = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > threshold
    return np.nonzero(d)[1]


class SlotStandIn:
    """Geometric solver plus one EngineSlot call per frame: a stand-in for the learned reconstructor.

    Until models/face_recon.onnx exists, the swap tests run a tiny ONNX model
    (avatar_app.inference.tiny_models "matmul", x (1, 32) -> y (1, 16)) through the
    engine controller's slot on the processing thread, exactly where the learned
    engine will run; its input is made from the frame's landmarks.

    Attributes:
        served: precision value -> calls served.
        errors: exceptions raised by the slot.
    """

    def __init__(self, engines, name: str = "face_recon"):
        from avatar_app.reconstruction.geometric import GeometricSolver

        self.inner = GeometricSolver()
        self.engines = engines
        self.name = name
        self.served: dict[str, int] = {}
        self.errors: list[BaseException] = []

    @property
    def slot(self):
        """The controller's slot (the window attaches an engine only once per slot)."""
        return self.engines.slot(self.name)

    def reset(self):
        self.inner.reset()

    def calibrate_neutral(self, landmarks):
        self.inner.calibrate_neutral(landmarks)

    def reconstruct(self, landmarks, t_s):
        params = self.inner.reconstruct(landmarks, t_s)
        slot = self.engines.slot(self.name)
        if slot is not None:
            x = np.asarray(landmarks.points[:32, 0], np.float32).reshape(1, 32)
            try:
                _, runner = slot.infer_with({"x": x})
                p = runner.precision.value
                self.served[p] = self.served.get(p, 0) + 1
            except Exception as exc:  # noqa: BLE001 - collected and asserted by the test
                self.errors.append(exc)
        return params


class ServedCounter:
    """Counts what an EngineSlot serves, per precision, on the app's own inference path.

    :meth:`attach` routes the slot's ``infer`` through ``infer_with`` (what
    ``EngineSlot.infer`` does anyway) and wraps ``step_with`` (the conv-state calls) to
    learn which engine served each call; the wrapped model (e.g. EngineSpeechAnimator) is
    untouched and keeps calling the slot on the processing thread.

    Attributes:
        served: precision value ("fp32", "int8") -> calls served.
        runs: the precisions in serving order, consecutive calls merged: [[precision, calls], ...].
        last_rows: precision -> the last row of ``output`` of each call ((C,) float32), at most
            ``keep`` per precision.
        errors: exceptions the slot raised (re-raised to the caller too).
    """

    def __init__(self, output: str, keep: int = 2000):
        self.output = output
        self.keep = keep
        self.served: dict[str, int] = {}
        self.runs: list[list] = []
        self.last_rows: dict[str, list[np.ndarray]] = {}
        self.errors: list[BaseException] = []
        self.slot = None

    def attach(self, slot) -> None:
        """Count the calls of ``slot`` from now on (once per slot)."""
        if self.slot is slot:
            return
        self.slot = slot
        infer_with, step_with = slot.infer_with, slot.step_with

        def count(runner, row) -> None:
            p = runner.precision.value
            self.served[p] = self.served.get(p, 0) + 1
            if self.runs and self.runs[-1][0] == p:
                self.runs[-1][1] += 1
            else:
                self.runs.append([p, 1])
            rows = self.last_rows.setdefault(p, [])
            if len(rows) < self.keep:
                rows.append(np.asarray(row).copy())

        def infer(feeds):
            try:
                out, runner = infer_with(feeds)
            except Exception as exc:  # noqa: BLE001 - collected for the test, then re-raised
                self.errors.append(exc)
                raise
            count(runner, out[self.output][0, -1])
            return out

        def step(stream, features, state):  # the conv-state calls (EngineSpeechAnimator on ORT CPU FP32)
            try:
                res = step_with(stream, features, state)
            except Exception as exc:  # noqa: BLE001 - collected for the test, then re-raised
                self.errors.append(exc)
                raise
            if res is not None:
                count(res[2], res[0][0, -1])
            return res

        slot.infer = infer
        slot.step_with = step

    def sequence(self) -> list[str]:
        """The precisions in serving order, consecutive calls merged (e.g. ["fp32", "int8", "fp32"])."""
        return [p for p, _ in self.runs]


def tiny_sample_fn(landmarks, neutral, audio):
    """Calibration sample of the tiny stand-in: x (1, 32) from the landmarks' x coordinates."""
    if landmarks is None:
        return None
    return {"x": np.asarray(landmarks.points[:32, 0], np.float32).reshape(1, 32)}


def tiny_model(folder: Path) -> Path:
    """Write the tiny "matmul" model (with its validation and calibration sets) into ``folder``."""
    from avatar_app.inference.tiny_models import write_tiny_model

    return write_tiny_model("matmul", folder)


def save_shot(widget, name: str) -> None:
    """Write a screenshot of ``widget`` to $AVATAR_SCREENSHOTS/<name>.png when that variable is set."""
    import os

    folder = os.environ.get("AVATAR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(folder) / f"{name}.png"))


def file_window(source, settings):
    """A MainWindow playing ``source`` with the built-in solvers (no engine models), not shown yet."""
    from avatar_app.pipeline.engines import EngineController
    from avatar_app.ui.main_window import MainWindow

    return MainWindow(source=source, settings=settings,
                      engines=EngineController(models={"face_recon": None, "speech2face": None}))


def shown_file_window(qtbot, source, settings):
    """:func:`file_window`, shown at its own layout (no fixed viewport size) and exposed."""
    win = file_window(source, settings)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    return win


def open_file_window(qtbot, source, settings, size=(640, 360)):
    """A MainWindow playing ``source`` with the built-in solvers (no engine models), shown and running.

    The viewport gets a fixed device-independent size so screenshots compare across runs.
    """
    return show_running(qtbot, file_window(source, settings), size)


def show_running(qtbot, win, size=(640, 360), ready=None, timeout_ms: int = 20000):
    """Show ``win`` with a fixed viewport size (pixels) and wait until its pipeline has processed
    5 frames and ``ready()`` (if given) is true; returns ``win``."""
    qtbot.addWidget(win)
    win.viewport.setFixedSize(*size)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: win.session.pipeline is not None and win.session.pipeline.frames_processed >= 5
                    and (ready is None or ready()), timeout=timeout_ms)
    return win
