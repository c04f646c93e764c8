"""``avatar-app`` command line: the window, offline render, the demo clip, engines.

    avatar-app                      open the window (camera 0)
    avatar-app --source FILE        open the window playing a video file live
    avatar-app render IN -o OUT.mp4 [--settings FILE] [--audio FILE] [--overlay] [--size WxH] [--fps N]
                                    [--face default|solver|engine]   (and render prints which face path ran)
    avatar-app demo -o demo.mp4     a short clip from data the package carries
    avatar-app contact-sheet -o sheet.png   every blendshape on the face model and the avatar
    avatar-app engines list|build|calibrate|clear   the inference engines

Errors the user can fix are printed as one line on stderr (no traceback) and
the exit status is non-zero: 2 for bad input (a truncated input still leaves the
part that decoded; an MP4 cut before its index, the ``moov`` box some writers put at
the end, has none and the message says so), 3 for no face, 4 for output errors (a missing output folder
is created; one that cannot be created is an output error). Ctrl+C (SIGINT) or
SIGTERM during ``render``/``demo`` finishes the clip with what was rendered (as
``NAME.partial.mp4`` beside an existing output), the audio cut to the same
length, and exits 130 / 143.

``render``/``demo`` write the clip and its blendshape track to hidden part files
(``.NAME.part-PID-XXXX.mp4``) beside the output and rename them over it when the
clip is kept, so a render that fails leaves an existing output as it was. A
render killed outright (kill -9, power loss) leaves its part file (it plays up to
the last quarter second written); the next render to the same output deletes it.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from avatar_app.core.errors import AvatarError, InputError, NoFaceError, RecordingError, error_line

log = logging.getLogger("avatar_app")


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must look like 1280x720, not {text!r}") from None
    if not (16 <= w <= 7680 and 16 <= h <= 4320):
        raise argparse.ArgumentTypeError(f"size {text} out of range (even numbers, 16..7680 x 16..4320)")
    if w % 2 or h % 2:  # H.264 4:2:0 needs even sides
        odd = " and ".join(f"{what} {v}" for what, v in (("width", w), ("height", h)) if v % 2)
        raise argparse.ArgumentTypeError(f"size {text}: {odd} must be even (e.g. {w + w % 2}x{h + h % 2})")
    return w, h


def _fps(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"fps must be a number, not {text!r}") from None
    if not 1 <= v <= 240:
        raise argparse.ArgumentTypeError(f"fps {v} out of range 1..240")
    return v


def _background(text: str):
    if text == "transparent":
        return "transparent"
    t = text.lstrip("#")
    if len(t) == 6:
        try:
            return tuple(int(t[i: i + 2], 16) for i in (0, 2, 4))
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"background must be 'transparent' or a colour like 00b140, not {text!r}")


#: Options whose value may start with "-" (e.g. ``--size -2x4``): argparse would take
#: such a value for an option and say "expected one argument" instead of the range.
_DASH_VALUE_OPTIONS = ("--size", "--fps")


def _join_dash_values(argv: list[str]) -> list[str]:
    """``["--size", "-2x4"]`` -> ``["--size=-2x4"]`` so the value reaches its type check.

    Args:
        argv: command-line arguments (without the program name).

    Returns:
        A new list; arguments after ``--`` are left alone.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a in _DASH_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (status 2), as every other error.

    Sub-command parsers are of the same class (argparse's ``add_subparsers``
    default), so ``avatar-app render --size 0x0`` says what is wrong and where
    the options are listed, without the multi-line usage block.
    """

    def error(self, message: str):  # noqa: D102 (argparse API)
        prog = self.prog
        if message.startswith("unrecognized arguments"):
            # argparse reports a sub-command's unknown option from the top-level parser
            prog = " ".join([prog] + _subcommand_path(self, sys.argv[1:]))
        self.exit(2, f"{prog}: error: {message} (`{prog} --help` lists the options)\n")


def _subcommand_path(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The sub-command names in ``argv`` (``["engines", "build"]``), following the parser's sub-parsers."""
    path = []
    for tok in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or tok not in subs[0].choices:
            continue
        parser = subs[0].choices[tok]
        path.append(tok)
    return path


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``avatar-app``."""
    from avatar_app import __version__

    p = _OneLineParser(
        prog="avatar-app", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn a webcam and microphone into a live 3D avatar.\n\n"
                    "Without a command, opens the studio window on the last source used (camera 0 the\n"
                    "first time), or on the file of --source or the camera of --camera.",
        epilog="examples:\n"
               "  avatar-app                             the studio window\n"
               "  avatar-app --source talk.mp4           the studio window playing a video file live\n"
               "  avatar-app render talk.mp4 -o out.mp4  an avatar clip of a recording\n\n"
               "`avatar-app COMMAND --help` lists a command's options.")
    p.add_argument("--version", action="version", version=f"avatar-app {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--source", type=Path, metavar="FILE",
                   help="open the window playing this video file live instead of the camera")
    p.add_argument("--camera", type=int, default=None, metavar="N",
                   help="open the window on camera N (default: the last one used, else 0)")
    sub = p.add_subparsers(dest="command")

    def common(sp):
        sp.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.mp4",
                        help="the clip to write; its blendshape track goes beside it (OUT.blendshapes.jsonl)")
        sp.add_argument("--overlay", action="store_true", help="draw the latency overlay into the clip")
        sp.add_argument("--size", type=_size, default=(1280, 720), metavar="WxH",
                        help="output size WxH in pixels, even numbers, width 16..7680 and height 16..4320 "
                             "(default 1280x720)")
        sp.add_argument("--fps", type=_fps, default=None, metavar="N",
                        help="output frame rate, 1..240 (default: the input video's; demo: its own clip's)")
        sp.add_argument("--msaa", type=int, choices=(0, 2, 4, 8), default=0,
                        help="anti-aliasing: multisample count, 0 = off (default 0)")
        sp.add_argument("--background", type=_background, default=None, metavar="COLOUR",
                        help="'transparent' or a hex colour (default: the settings file's, else 00b140, "
                             "chroma green)")
        sp.add_argument("--avatar", type=Path, default=None, metavar="FILE",
                        help="a .glb/.gltf/.vrm avatar (default: the settings file's, else the default head)")
        sp.add_argument("--settings", type=Path, default=None, metavar="FILE",
                        help="the studio's settings file (File › Export settings…): tracking tuning, "
                             "expressions, mirror, background, lighting and avatar as in the studio "
                             "(default: a fresh studio's)")
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser(
        "render", help="render an avatar clip from a video file (every frame, offline)",
        description="Render an avatar clip from a recording of a face: every frame, in media time.\n"
                    "The video's own audio (or --audio) drives the mouth and goes into the clip.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n"
               "  avatar-app render talk.mp4 -o avatar.mp4 --audio voice.wav --size 1920x1080\n\n"
               "exit status: 0 done; 2 bad input (a truncated video or --audio file still leaves the part\n"
               "that decoded, as OUT.partial.mp4 when OUT.mp4 exists); 3 no face in any frame; 4 the output\n"
               "cannot be written; 130 / 143 stopped by Ctrl+C / SIGTERM (what was rendered is kept).")
    r.add_argument("input", type=Path, help="video file with a face (.mp4, .mov, .mkv, .webm, .mpg, .ts ...)")
    r.add_argument("--audio", type=Path, default=None, metavar="FILE",
                   help="drive the mouth with this audio file (.wav, .mp3, .flac, or a video's track) "
                        "instead of the video's own, and put it in the clip")
    r.add_argument("--no-audio", action="store_true", help="ignore audio (silent clip, mouth from video only)")
    r.add_argument("--tracker", choices=("auto", "onnx", "mediapipe"), default=None,
                   help="face tracker: mediapipe (CPU), onnx (the same landmark models as inference engines: "
                        "ONNX Runtime or TensorRT) or auto (default: the settings file's Tracking choice, else "
                        "auto: onnx where an NVIDIA GPU backend runs, else mediapipe)")
    from avatar_app.pipeline.stages import FACE_PATHS, resolve_face_path

    r.add_argument("--face", choices=FACE_PATHS, default=None,
                   help="face path: solver (the geometric solver), engine (the learned face engine; the solver "
                        "when its model cannot load, and the summary says why) or default (the settings file's "
                        "face path, else the app's default: " + resolve_face_path("default") + ")")
    r.add_argument("--remote", metavar="grpc://HOST:PORT", default=None,
                   help="run the engines on an 'avatar-app serve' server (local engines when it does not answer)")
    common(r)
    d = sub.add_parser("demo", help="render a short demo clip from data the package carries")
    common(d)
    cs = sub.add_parser("contact-sheet",
                        help="neutral and all 52 shapes on the face model and the default avatar, one PNG")
    cs.add_argument("-o", "--output", type=Path, required=True, help="output .png")
    cs.add_argument("--tile", type=int, default=192, help="edge of one tile in pixels (64..1024, default 192)")
    try:
        from avatar_app.inference.cli import add_engines_parser
    except ImportError:  # engine layer not installed in this build
        pass
    else:
        add_engines_parser(sub)
    try:
        from avatar_app.serve.cli import add_serve_parser
    except ImportError:  # serving not in this build
        pass
    else:
        add_serve_parser(sub)
    return p


class _Progress:
    """A one-line progress bar on stderr (only on a terminal unless forced)."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        pct = int(100 * done / max(total, 1))
        if pct != self._last:
            self._last = pct
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\r{self.label} [{bar:<25s}] {pct:3d}%  {done}/{total} frames")
            sys.stderr.flush()

    def end(self) -> None:
        if self.enabled and self._last >= 0:
            sys.stderr.write("\n")


def _render_options(args):
    """RenderOptions from the command line and the studio's settings file (``--settings``).

    Without ``--settings`` the post-processing is a fresh studio's; the options given
    on the command line (``--background``, ``--avatar``, ``--tracker``, ``--face``) win over the file's
    (``--face default`` is the app's default whatever the file says).
    The face tracker is the file's Tracking row (with its ONNX backend and precision)
    unless ``--tracker`` names one; the file's backend and precision apply whenever the
    ONNX tracker runs.

    Each invalid or out-of-range value of the settings file is rejected (its default used) and
    named in a ``warning:`` line on stderr.

    Raises:
        InputError: the settings file cannot be read.
    """
    from avatar_app.pipeline import RenderOptions
    from avatar_app.pipeline.settings import StudioSettings, load_settings_file

    report: list[str] = []
    studio = load_settings_file(args.settings, report) if args.settings is not None else StudioSettings()
    for line in report:  # rejected values: say each one (the render goes on with the default)
        print(f"warning: {args.settings}: {line}", file=sys.stderr)
    bg = studio.avatar.background
    background = args.background if args.background is not None else (bg if isinstance(bg, str) else tuple(bg))
    avatar = args.avatar if args.avatar is not None else (Path(studio.avatar.path) if studio.avatar.path else None)
    if args.avatar is None and avatar is not None and not avatar.is_file():  # exported on another PC
        print(f"warning: {args.settings}: avatar.path: {str(avatar)!r} does not exist here; using the default head",
              file=sys.stderr)
        avatar = None
    return RenderOptions(
        size=args.size, fps=args.fps, overlay=args.overlay, msaa=args.msaa, background=background,
        audio_path=getattr(args, "audio", None), use_audio=not getattr(args, "no_audio", False),
        avatar_path=avatar, avatar_from_settings=args.avatar is None and avatar is not None,
        lighting=studio.avatar.lighting, settings=studio.chain(),
        tracker=getattr(args, "tracker", None) or studio.engines.tracker["kind"],
        tracker_backend=studio.engines.tracker["backend"], tracker_precision=studio.engines.tracker["precision"],
        face=getattr(args, "face", None) or studio.engines.face,
    )


class _StopOnSignal:
    """While active, SIGINT and SIGTERM set :attr:`event` instead of killing the render.

    The render loop sees the event, finishes the clip and the sidecar with what
    was rendered and returns; a second signal raises KeyboardInterrupt (forced
    stop). :attr:`signum` is the first signal received (None if none).
    Handlers are installed only from the main thread and restored on exit.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.event = threading.Event()
        self.signum: int | None = None
        self._old: dict = {}

    def _handle(self, signum, _frame) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.signum = signum
        self.event.set()

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    @property
    def exit_status(self) -> int:
        """128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + int(self.signum or signal.SIGINT)


def _seconds(x: float) -> str:
    return f"{x:.1f} s"


def _print_interrupted(rep) -> None:
    """One line saying what an interrupted render kept."""
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if rep.frames_out == 0:
        kept = (f"the existing {rep.output_path} was kept as it was" if Path(rep.output_path).exists()
                else f"{rep.output_path} was not written")
        print(f"interrupted before the first frame was rendered: nothing was written; {kept}",
              file=sys.stderr)
        return
    v, a = rep.duration_s, rep.audio_duration_s
    if a <= 0:
        what = f"{_seconds(v)} of video (no audio)"
    elif abs(a - v) < 0.05:
        what = f"{_seconds(v)} of video and audio"
    else:
        what = f"{_seconds(v)} of video and {_seconds(a)} of audio"
    print(f"interrupted: kept {what} in {rep.output_path} "
          f"({rep.frames_out} frames; blendshapes in {rep.sidecar_path})", file=sys.stderr)


def _followed(rep) -> str:
    """Which face was tracked when several were in view ("" for one): the tracker's rule (face_mesh)."""
    n = getattr(rep, "faces_in_view", 0)
    return f", the largest of {n} faces in view, then followed" if rep.tracker and n > 1 else ""


def _print_report(rep) -> None:
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    stages = ", ".join(f"{k} {v[0]:.1f} ms" for k, v in rep.stage_ms.items())
    print(
        f"wrote {rep.output_path} ({rep.frames_out} frames, {rep.duration_s:.2f} s video, "
        f"{rep.audio_duration_s:.2f} s audio) and {rep.sidecar_path}; "
        f"face in {rep.faces_found}/{rep.frames_in} frames ("
        f"{'tracked by ' + rep.tracker if rep.tracker else 'recorded face data, no tracker run'}"
        f"{_followed(rep)}; "
        f"{rep.face_solver or 'geometric solver'}); "
        f"mouth from {rep.speech_backend or 'the video alone'}; "
        f"{rep.fps:.1f} fps ({stages})"
    )
    if rep.face_path:
        print(f"face path: {rep.face_path}")


def _cmd_render(args) -> int:
    from avatar_app.pipeline import render_file

    if getattr(args, "remote", None):
        from functools import partial

        from avatar_app.serve.remote_render import render_file_remote

        render_file = partial(render_file_remote, args.remote)
    if args.audio is not None and args.no_audio:
        raise InputError("--audio and --no-audio cannot be used together")
    prog = _Progress("rendering", not args.quiet and sys.stderr.isatty())
    with _StopOnSignal() as stopper:
        try:
            rep = render_file(args.input, args.output, _render_options(args), progress=prog, stop=stopper.event)
        finally:
            prog.end()
    if rep.interrupted:
        _print_interrupted(rep)
        return stopper.exit_status
    if rep.input_problem:
        for w in rep.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(
            # "what could be decoded", not "the first X s": a corrupt stretch can lose frames in the
            # middle, and a cut --audio file leaves the whole video rendered
            f"error: {rep.input_problem}; rendered what could be decoded, {_seconds(rep.duration_s)} "
            f"({rep.frames_out} frames), into {rep.output_path} and {rep.sidecar_path}",
            file=sys.stderr,
        )
        return 2
    _print_report(rep)
    return 0


def _cmd_demo(args) -> int:
    from avatar_app.pipeline import render_demo

    prog = _Progress("demo", not args.quiet and sys.stderr.isatty())
    with _StopOnSignal() as stopper:
        try:
            rep = render_demo(args.output, _render_options(args), progress=prog, stop=stopper.event)
        finally:
            prog.end()
    if rep.interrupted:
        _print_interrupted(rep)
        return stopper.exit_status
    _print_report(rep)
    return 0


def _cmd_window(args) -> int:
    from avatar_app.ui.app import run_window

    return run_window(source=args.source, camera=args.camera)


def _name_max(folder: Path) -> int:
    """Longest file name the file system of ``folder`` (or its nearest existing parent) takes, bytes."""
    for f in (folder, *folder.parents):
        try:
            if f.is_dir():
                return int(os.pathconf(f, "PC_NAME_MAX"))
        except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or it cannot say
            break
    return 255


def check_name_lengths(args) -> None:
    """Refuse path arguments with a name longer than the file system takes, in one line each.

    Every component of ``input``, ``--audio``, ``--avatar``, ``--settings`` and ``--source`` must fit
    (else InputError, exit 2); ``-o``'s folders and the longest name written beside it must fit
    (the render's part files, :func:`~avatar_app.record.parts.longest_part_name_bytes`; the contact
    sheet's ``.<name>.part``), else RecordingError, exit 4. Without this the first ``stat`` raised
    ``OSError: File name too long`` as a traceback.

    Raises:
        InputError, RecordingError: as above, naming the argument and the limit.
    """
    for attr, what in (("input", "the input"), ("audio", "--audio"), ("avatar", "--avatar"),
                       ("settings", "--settings"), ("source", "--source")):
        value = getattr(args, attr, None)
        if value is None:
            continue
        path = Path(value)
        limit = _name_max(path.parent)
        for part in path.parts:
            if len(os.fsencode(part)) > limit:
                raise InputError(f"{what} has a name of {len(os.fsencode(part))} bytes, longer than the "
                                 f"{limit} this file system takes: {part[:40]}…", path)
    out = getattr(args, "output", None)
    if out is None:
        return
    out = Path(out)
    limit = _name_max(out.parent)
    for part in out.parent.parts:
        if len(os.fsencode(part)) > limit:
            raise RecordingError(f"cannot write {part[:40]}…/{out.name[:40]}: a folder name of "
                                 f"{len(os.fsencode(part))} bytes is longer than the {limit} this file "
                                 "system takes")
    sheet = getattr(args, "command", None) == "contact-sheet"  # its part file: .<name>.part
    stem = out.name if sheet else out.stem
    if sheet:
        need = len(os.fsencode(f".{out.name}.part"))
    else:
        from avatar_app.pipeline.writer import SIDECAR_SUFFIX
        from avatar_app.record.parts import longest_part_name_bytes

        need = longest_part_name_bytes(out, (SIDECAR_SUFFIX,))
    extra = need - len(os.fsencode(stem))
    if need > limit:
        most = limit - extra
        raise RecordingError(f"the output name {out.name[:40]}… is too long: the files written beside it "
                             f"add {extra} bytes to its {'name' if stem == out.name else 'stem'}, so it may "
                             f"have at most {most} bytes here (it has {len(os.fsencode(stem))})")


def _beside_output(args, filename) -> bool:
    """Whether ``filename`` (an OSError's) is in the output's folder: an output error (exit 4)."""
    out = getattr(args, "output", None)
    if out is None or not filename:
        return False
    try:
        return Path(os.fsdecode(filename)).absolute().parent == Path(out).absolute().parent
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``avatar-app`` console script. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else list(argv)))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("GLOG_minloglevel", "2")  # quiet MediaPipe's C++ logging
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        check_name_lengths(args)
        if args.command == "render":
            return _cmd_render(args)
        if args.command == "demo":
            return _cmd_demo(args)
        if args.command == "contact-sheet":
            from avatar_app.render.contact_sheet import make_contact_sheet

            print(f"wrote {make_contact_sheet(args.output, size=args.tile)}")
            return 0
        if args.command == "engines":
            from avatar_app.inference.cli import run_engines

            return run_engines(args)
        if args.command == "serve":
            from avatar_app.serve.cli import run_serve

            return run_serve(args)
        return _cmd_window(args)
    except NoFaceError as exc:
        print(error_line(exc), file=sys.stderr)
        return 3
    except RecordingError as exc:
        print(error_line(exc), file=sys.stderr)
        return 4
    except AvatarError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    except OSError as exc:  # a file-system refusal no check above foresaw: one line, not a traceback
        log.debug("unexpected OS error", exc_info=True)
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {(exc.strerror or str(exc)).lower()}{where}", file=sys.stderr)
        return 4 if _beside_output(args, exc.filename) else 2
    except KeyboardInterrupt:
        out = getattr(args, "output", None)
        where = f": {out} was not written (an existing file there is left as it was)" if out else ""
        print(f"interrupted before the output was finished{where}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
