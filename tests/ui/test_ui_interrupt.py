"""Ctrl+C (SIGINT) in the terminal that started the studio closes it as File › Quit does,
finishing a recording in progress (issue 21, item 4).

A real ``avatar-app --source VIDEO`` process: a small driver starts a recording
once frames show, says where it goes, and the test sends SIGINT. Before the fix
PySide6 swallowed the KeyboardInterrupt inside a slot and the window kept running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import queue
import threading

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.gl]

#: The driver: the window as ``avatar-app`` opens it (ui.app.run_window), plus a timer that starts a
#: recording once 10 frames were presented and prints the clip's path, then prints WRITTEN once the
#: recorder has encoded 10 frames (the test signals only then: a file-size wait raced the encoder).
DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from PySide6.QtCore import QTimer
    from avatar_app.ui import app as ui_app

    app = ui_app.create_app()

    state = {"started": False}

    def poll():
        for w in app.topLevelWidgets():
            if type(w).__name__ != "MainWindow":
                continue
            rec = w.recording.recorder
            if not state["started"] and w.viewport.frames_presented >= 10 and rec is None:
                path = w.recording.start_recording()
                print("RECORDING", path, flush=True)
                state["started"] = True
            elif state["started"] and rec is not None and rec.recorder.frames_written >= 10:
                # rec: AsyncRecorder; rec.recorder: the SyncedRecorder that counts encoded frames
                print("WRITTEN", rec.recorder.frames_written, flush=True)
                timer.stop()

    timer = QTimer()
    timer.timeout.connect(poll)
    timer.start(50)
    sys.exit(ui_app.run_window(source=Path(sys.argv[1])))
""")


def test_sigint_closes_the_window_and_keeps_the_recording(testdata, tmp_path):
    import av

    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(tmp_path / "config"),
               AVATAR_APP_DATA_DIR=str(tmp_path / "data"), AVATAR_APP_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(testdata / "video" / "grid_s1_bbaf2n.mp4")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:  # the driver's stdout, line by line, so that a hung window cannot hang the test
        for text in iter(proc.stdout.readline, ""):
            lines.put(text)

    threading.Thread(target=pump, daemon=True).start()

    def next_line(timeout_s: float = 120.0) -> str:
        try:
            return lines.get(timeout=timeout_s)
        except queue.Empty:
            return ""

    try:
        line = next_line()  # waits until the recording started (or the process ended)
        assert line.startswith("RECORDING "), f"no recording started: {line!r} {proc.stderr.read()[-3000:]}"
        clip = line.split(" ", 1)[1].strip()
        # a few more frames into the clip: blocks until the recorder has encoded 10 frames
        line = next_line()
        assert line.startswith("WRITTEN "), f"the recording did not reach 10 frames: {line!r}"
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the window was still running 90 s after Ctrl+C (SIGINT)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert rc == 0, f"exit status {rc}: {err[-3000:]}"
    assert os.path.isfile(clip), f"the recording {clip} was not kept: {err[-3000:]}"
    with av.open(clip) as f:  # a finished, playable clip with video and the file's audio
        kinds = {s.type for s in f.streams}
        frames = sum(1 for _ in f.decode(video=0))
    assert {"video", "audio"} <= kinds, kinds
    assert frames >= 10, frames
