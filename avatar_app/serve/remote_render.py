"""``avatar-app render --remote grpc://HOST:PORT``: an offline render whose engines run on a server.

The solvers are the ones a local render uses (the face engine when the render's face
path is the engine, the default (:data:`~avatar_app.pipeline.stages.FACE_ENGINE_BY_DEFAULT`) or ``--face engine``;
the speech engine when there is audio), opened on the ``remote`` backend: each
engine call goes to the server, and to the local engine standing by when the
server stops answering (:class:`~avatar_app.inference.remote.RemoteRunner`).
Every switch becomes a warning in the render's report naming the wall-clock time,
the frame and the clip time of the switch.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from avatar_app.core.clock import now_ns
from avatar_app.inference.remote import SwitchEvent, remote_runners, set_remote_url

logger = logging.getLogger(__name__)


class _FrameClock:
    """Records when each frame was done (process clock), to place switch events in the clip."""

    def __init__(self, progress: Callable[[int, int], None] | None):
        self._progress = progress
        self.marks: list[tuple[int, int]] = [(now_ns(), 0)]

    def __call__(self, done: int, total: int) -> None:
        self.marks.append((now_ns(), done))
        if self._progress is not None:
            self._progress(done, total)

    def frame_at(self, t_ns: int) -> int:
        """Index of the frame being processed at ``t_ns`` (frames done by then)."""
        done = 0
        for t, n in self.marks:
            if t > t_ns:
                break
            done = n
        return done


def switch_warning(ev: SwitchEvent, frame: int, fps: float, local: str) -> str:
    """The report's line for one switch.

    Args:
        ev: the switch.
        frame: index of the first frame it affected.
        fps: the output frame rate (for the clip time).
        local: the local engine's description (``ort_cpu (fp32)``).
    """
    where = f"at {ev.clock()} (frame {frame}, {frame / fps:.2f} s into the clip)"
    if ev.to == "local":
        return f"{ev.model}: {ev.reason}; switched to the local engine ({local}) {where}"
    return f"{ev.model}: {ev.reason}; switched back to the server {where}"


def local_spans(runner, clock: _FrameClock, frames: int) -> list[tuple[int, int]]:
    """The frames (first, last), inclusive, that ``runner``'s local engine served after switches.

    Args:
        runner: a RemoteRunner (its ``events``, in time order).
        clock: the render's frame clock.
        frames: frames in the clip (a span still open at the end closes at ``frames - 1``).
    """
    spans, start = [], None
    for ev in runner.events:
        f = clock.frame_at(ev.t_ns)
        if ev.to == "local" and start is None:
            start = f
        elif ev.to != "local" and start is not None:
            if f > start:
                spans.append((start, f - 1))
            start = None
    if start is not None and frames > start:
        spans.append((start, frames - 1))
    return spans


def finished_locally(report, runner, clock: _FrameClock, fps: float, url: str) -> str:
    """Make the report's engine name say who served the frames after switches between server and local.

    The report's ``speech_backend`` or ``face_solver`` (whichever names ``runner``'s model)
    described the server as the stages were built. After a switch to the local engine that lasted
    to the end, it becomes that engine, with when it took over; when the server came back and
    finished, it keeps naming the server and adds the frames the local engine served (new-user
    trial: 390 of 587 frames ran locally while the summary named only the server). Returns the
    new text ("" when every frame went through the server).
    """
    final = runner.events[-1] if runner.events else None
    if final is None:
        return ""
    if final.to != "local":
        frames = int(getattr(report, "frames_out", 0) or 0)
        spans = local_spans(runner, clock, frames)
        if not spans:
            return ""
        n = sum(b - a + 1 for a, b in spans)
        ranges = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
        of = f" of {frames}" if frames else ""
        text = f"; the local engine ({runner.local.describe()}) served frames {ranges} ({n}{of})"
        if final.model in report.speech_backend:
            report.speech_backend += text
            return report.speech_backend
        if final.model in report.face_solver:
            report.face_solver += text
            return report.face_solver
        return ""
    frame = clock.frame_at(final.t_ns)
    if getattr(runner, "remote_calls", 1) == 0:  # the server never answered (refused, unresolvable)
        text = f"{runner.local.describe()} (local: the server {url} never answered)"
    else:
        text = (f"{runner.local.describe()} (local, from {final.clock()}, frame {frame}, {frame / fps:.2f} s "
                f"into the clip; before that the server {url})")
    if final.model in report.speech_backend:
        report.speech_backend = text
    elif final.model in report.face_solver:
        report.face_solver = text
    return text


def render_file_remote(url: str, input_path, output_path, options=None, progress=None, stop=None):
    """:func:`~avatar_app.pipeline.render_file` with the engines on the server at ``url``.

    Args:
        url: ``grpc://HOST:PORT`` of an ``avatar-app serve``.
        input_path, output_path, options, progress, stop: as for ``render_file``.

    Returns:
        The RenderReport; its ``warnings`` name every switch between server and local engines.

    Raises:
        InputError: a malformed URL; and whatever ``render_file`` raises.
    """
    from avatar_app.pipeline import RenderOptions, render_file
    from avatar_app.pipeline.stages import StageChoice, build_face, build_speech

    set_remote_url(url)
    options = options or RenderOptions()
    notes: list[str] = []
    choice = StageChoice(audio=options.use_audio, backend="remote", on_fallback=notes.append, face=options.face)
    reconstructor, face_path = build_face(choice)
    speech = build_speech(choice)
    clock = _FrameClock(progress)
    try:
        report = render_file(Path(input_path), Path(output_path), options, progress=clock,
                             reconstructor=reconstructor, speech=speech, stop=stop)
    finally:
        runners = remote_runners(reconstructor, speech)
        for obj in (reconstructor, speech):
            if hasattr(obj, "close"):
                obj.close()
        set_remote_url(None)
    report.warnings[:0] = notes
    report.face_path = face_path.summary()
    fps = report.frames_out / report.duration_s if report.duration_s > 0 else float(options.fps or 30.0)
    for r in runners:
        local = r.local.describe().split(" on ", 1)[-1]
        for ev in r.events:
            report.warnings.append(switch_warning(ev, clock.frame_at(ev.t_ns), fps, local))
    for r in runners:
        finished_locally(report, r, clock, fps, url)
    if not runners:
        report.warnings.append(no_server_warning(url, report))
    return report


def no_server_warning(url: str, report) -> str:
    """The report's line when no engine of a ``--remote`` render ran through the server.

    Says why (tritonclient is not installed, or the server did not answer) and what
    ran locally instead, from the report's ``face_solver`` and ``speech_backend``: the
    learned engines (``face_recon.onnx on ort_cpu …``), or the built-in solvers, which
    need no server.

    Args:
        url: the ``grpc://HOST:PORT`` given.
        report: the render's RenderReport (``face_solver``, ``speech_backend``).
    """
    from avatar_app.inference.triton_client import tritonclient_version

    engines = [t.split(" (", 1)[0] for t in (report.face_solver, report.speech_backend) if ".onnx" in t]
    if not engines:
        solvers = [t for t in (report.face_solver, report.speech_backend) if t]
        return (f"no engine of this render uses the server {url}: the {' and the '.join(solvers) or 'solvers'} "
                f"run locally and need none (the face engine, the default face path, and the speech engine "
                "run on the server)")
    if tritonclient_version() is None:
        why = "tritonclient is not installed (pip install 'avatar-app[serve]')"
    else:
        why = f"the server {url} does not answer"
    return f"--remote {url} was not used: {why}; the engines ran locally ({'; '.join(engines)})"
