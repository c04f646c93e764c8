"""``avatar-app engines list|build|calibrate|clear``.

The app's CLI adds these with :func:`add_engines_parser` and dispatches with
:func:`run_engines`::

    sub = parser.add_subparsers(dest="command")
    add_engines_parser(sub)
    ...
    if args.command == "engines":
        return run_engines(args)
"""
from __future__ import annotations

import argparse
import datetime
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from avatar_app.core.errors import (
    AvatarError,
    BackendUnavailableError,
    InputError,
    VerificationUnavailableError,
    error_line,
)

logger = logging.getLogger(__name__)


def add_engines_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``engines`` command and its sub-commands to an argparse subparsers object.

    Returns:
        The ``engines`` parser.
    """
    p = subparsers.add_parser("engines", help="inference engines: list, build, calibrate, clear",
                              description="Inspect and build the inference engines and their cache.")
    sub = p.add_subparsers(dest="engines_command", metavar="{list,build,calibrate,clear}")
    sub.required = True

    ls = sub.add_parser("list", help="backends, devices, precisions and cached engines")
    ls.add_argument("--model", action="append", default=[],
                    help="also show which engines this model would use (path or name in models/)")

    b = sub.add_parser("build", help="build, verify and cache one engine")
    b.add_argument("--model", required=True, help="ONNX path, or a model name in models/")
    b.add_argument("--backend", default="ort_cpu", help="backend name (see 'engines list')")
    b.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "int8"])
    b.add_argument("--calibration-method", default="percentile", choices=["percentile", "entropy", "minmax"])
    b.add_argument("--force", action="store_true", help="rebuild even if a valid cached engine exists "
                   "(a build that failed before is always tried again)")
    b.add_argument("--inline", action="store_true", help="build in this process (no child process)")

    c = sub.add_parser("calibrate", help="manage your own INT8 calibration samples (kept on this machine)")
    c.add_argument("--model", required=True, help="ONNX path, or a model name in models/")
    c.add_argument("--add", action="append", default=[], type=Path, metavar="NPZ",
                   help="add recorded samples (.npz, one array per input, samples on axis 0)")
    c.add_argument("--clear", action="store_true", help="delete all your stored samples of this model")

    cl = sub.add_parser("clear", help="delete cached engines")
    cl.add_argument("--model", default=None, help="only engines of this model name")
    cl.add_argument("--unused", action="store_true",
                    help="only engines the app no longer uses: built from another file than the "
                         "shipped model of that name (e.g. before an update), with another version of "
                         "the backend than the installed one, for another device, engines that cannot "
                         "run on this machine, or unusable entries")
    return p


def resolve_model(text: str) -> Path:
    """A model path from a path or a name of a shipped model (``face_recon``).

    Raises:
        InputError: neither exists.
    """
    p = Path(text)
    if p.is_file():
        return p
    if p.is_dir():
        raise InputError(f"model {text!r} is a folder: give an .onnx file or a shipped model's name", text)
    if p.parent != Path(".") or p.suffix == ".onnx":  # a path, not the name of a shipped model
        raise InputError(f"model file not found: '{p}'", text)
    from avatar_app.resources import resource_path

    for cand in (resource_path(f"models/{text}"), resource_path(f"models/{text}.onnx")):
        if cand.is_file():
            return cand
    shipped = [q.stem for q in _shipped_models()]
    raise InputError(f"model {text!r} not found: no such file, and no {text}.onnx in "
                     f"{resource_path('models')}; shipped models: {', '.join(shipped) or 'none'}", text)


def run_engines(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run an ``engines`` sub-command.

    Args:
        args: the parsed command line (:func:`add_engines_parser`).
        out: where reports go (default stdout).
        err: where the one-line error goes (default stderr).

    Returns:
        Exit status (README, Engines): 0 on success; 1 when the command failed (a missing,
        unreadable or broken model, a failed build; message on ``err``); 2 when the engine
        cannot run on this machine (unknown backend, backend unavailable here, a precision
        that cannot be verified here for want of real validation data, or built but rejected
        by verification or left unverified).
    """
    out = out or sys.stdout
    try:
        cmd = args.engines_command
        if cmd == "list":
            return _list(args, out)
        if cmd == "build":
            precision, method = getattr(args, "precision", "int8"), getattr(args, "calibration_method", "percentile")
            if precision != "int8" and method != "percentile":
                print(f"warning: --calibration-method {method} applies to INT8 builds only; "
                      f"this {precision} build has no calibration", file=err or sys.stderr)
            return _build(args, out)
        if cmd == "calibrate":
            return _calibrate(args, out)
        if cmd == "clear":
            return _clear(args, out)
        raise InputError(f"unknown engines command {cmd!r}")
    except AvatarError as exc:
        print(error_line(exc), file=err or sys.stderr)
        return 2 if isinstance(exc, (BackendUnavailableError, VerificationUnavailableError)) else 1


def _shipped_models() -> list[Path]:
    """The shipped ``models/*.onnx`` files (checkout or installed package), sorted."""
    from avatar_app.resources import resource_path

    return sorted(resource_path("models").glob("*.onnx"))


def _shipped_model_hashes() -> dict[str, str]:
    """Name -> SHA-256 (hex) of each shipped model (to tell cache entries apart)."""
    from avatar_app.inference.modelinfo import sha256_file

    return {q.stem: sha256_file(q) for q in _shipped_models()}


@dataclass(frozen=True)
class _BackendHere:
    """What one backend is on this machine, for telling cache entries the app can use.

    Attributes:
        version: the installed version (None: not installed).
        can_run: engines of it run here.
        reason: why not ("" when they do).
        device: its :meth:`~avatar_app.inference.backends.Backend.device_key` here (only when it can run).
    """

    version: str | None
    can_run: bool
    reason: str = ""
    device: str = ""


def _backends_here() -> dict[str, _BackendHere]:
    """Registered backend name -> :class:`_BackendHere`."""
    from avatar_app.inference.backends import backend_statuses, get_backend

    out = {}
    for st in backend_statuses():
        device = get_backend(st.name).device_key() if st.can_run else ""
        out[st.name] = _BackendHere(st.version if st.installed else None, st.can_run, st.reason, device)
    return out


def _unused_reason(entry, shipped: dict[str, str], here: dict[str, _BackendHere]) -> str | None:
    """Why the app no longer uses a cache entry, or None when it may.

    The app looks an engine up by a key that holds the model's hash, the backend's
    installed version and this machine's device, and opens only engines that run
    here: an entry that differs in any of them is never used again.

    Args:
        entry: a checked :class:`~avatar_app.inference.cache.CacheEntry`, or None (unusable).
        shipped: shipped model name -> SHA-256 (:func:`_shipped_model_hashes`).
        here: backend name -> what it is on this machine (:func:`_backends_here`).
    """
    if entry is None:
        return "unusable"
    m = entry.manifest
    sha = str(m.key.get("onnx_sha256", ""))
    if m.model_name in shipped and sha != shipped[m.model_name]:
        return "not the shipped file"
    backend, built = m.key.get("backend"), m.key.get("backend_version")
    if backend not in here:
        return f"unknown backend {backend}"
    now = here[backend]
    if now.version != built:
        return f"built with {backend} {built}, " + (
            f"{now.version} is installed" if now.version else "not installed now")
    if not now.can_run:
        return f"cannot run on this machine ({now.reason or backend + ' cannot run here'})"
    if m.key.get("device") != now.device:
        return f"built for {m.key.get('device')}, this machine has {now.device}"
    if m.status == "unverified":
        return "never verified (built where it could not run)"
    return None


def _list(args, out) -> int:
    from avatar_app.inference.backends import backend_statuses
    from avatar_app.inference.cache import EngineCache

    print("Backends (preferred first):", file=out)
    for st in backend_statuses():
        state = ("ready" if st.can_run else "build only" if st.can_build
                 else "installed, unusable" if st.installed else "not installed")
        print(f"  {st.name:<13} {state:<20} {st.version or '-'}", file=out)
        if st.reason:
            print(f"      why: {st.reason}", file=out)
        for d in st.devices:
            print(f"      device: {d}", file=out)
        if st.installed:
            for prec, why in st.precisions.items():
                if why is None:
                    text = "supported" if st.can_run else "can be built, not run here"
                else:
                    text = "no (see why)" if why == st.reason else f"no - {why}"
                print(f"      {prec}: {text}", file=out)
    from avatar_app.resources import resource_path

    names = ", ".join(q.stem for q in _shipped_models()) or "none"
    print(f"\nModels: {resource_path('models')} ({names})", file=out)
    from avatar_app.inference.modelinfo import ModelInfo

    for q in _shipped_models():  # a damaged model file is said here, not only when the app opens it
        try:
            ModelInfo.from_onnx(q)
        except AvatarError as exc:
            print(f"  {q.stem}: cannot be read, the app falls back without it ({exc})", file=out)
    cache = EngineCache()
    entries = cache.entries()
    print(f"Engine cache: {cache.engines_dir} ({len(entries)} {'entry' if len(entries) == 1 else 'entries'})", file=out)
    shipped = _shipped_model_hashes()
    here = _backends_here()
    for folder, entry, problem in entries:
        if entry is None:
            print(f"  {folder.name}: UNUSABLE - {problem} (will be rebuilt)", file=out)
            continue
        m = entry.manifest
        when = datetime.datetime.fromtimestamp(m.built_at).strftime("%Y-%m-%d %H:%M")
        sha = str(m.key.get("onnx_sha256", ""))
        unused = _unused_reason(entry, shipped, here)
        which = (f", {unused} (unused by the app)" if unused else
                 ", current model" if m.model_name in shipped else "")
        print(f"  {m.model_name} {m.key['precision']} {m.key['backend']} {m.key['backend_version']} "
              f"[{m.key['device']}] {m.status} ({m.artifact_size / 1e6:.2f} MB, built {when} "
              f"in {m.build_time_s:.1f} s; model {sha[:8]}{which})", file=out)
        for what in ("calibration", "int8_layers"):
            if m.details.get(what):
                print(f"      {what.replace('_', ' ')}: {m.details[what]}", file=out)
        v = m.verification_result
        if v is not None:
            print(f"      verification: {v.summary()}", file=out)
        elif m.reason:
            print(f"      {m.reason}", file=out)
    failures = cache.failures()
    if failures:
        print("Failed builds (remembered, not tried again at start; `engines build` retries):", file=out)
    for f in failures:
        when = datetime.datetime.fromtimestamp(f.when).strftime("%Y-%m-%d %H:%M")
        print(f"  {f.model_name} {f.key.get('precision')} {f.key.get('backend')} {f.key.get('backend_version')} "
              f"[{f.key.get('device')}] failed {when}: {f.reason}", file=out)
    for text in args.model:
        from avatar_app.inference.manager import EngineManager

        path = resolve_model(text)
        result = EngineManager().open_engine(path)
        print(f"\n{path.name} would run on {result.runner.describe()}:", file=out)
        for a in result.attempts:
            print(f"  {a.line()}", file=out)
        result.runner.close()
    return 0


class _ProgressBar:
    """A one-line text progress bar on a stream (no extra dependency)."""

    def __init__(self, out: TextIO, width: int = 30):
        self.out, self.width = out, width

    def __call__(self, stage: str, fraction: float) -> None:
        n = int(round(max(0.0, min(1.0, fraction)) * self.width))
        end = "\n" if fraction >= 1.0 else ""
        tty = getattr(self.out, "isatty", lambda: False)()
        prefix = "\r" if tty else ""
        if not tty:
            end = "\n"
        print(f"{prefix}[{'#' * n}{'.' * (self.width - n)}] {fraction * 100:3.0f}% {stage:<40}",
              end=end, file=self.out, flush=True)


def _build(args, out) -> int:
    from avatar_app.inference.manager import EngineManager

    path = resolve_model(args.model)
    mgr = EngineManager(isolate=not args.inline, calibration_method=args.calibration_method)
    # an explicit build always tries again, also when this engine's build failed before
    entry = mgr.retry(path, args.backend, args.precision, progress=_ProgressBar(out), force=args.force)
    m = entry.manifest
    print(f"{path.name} {args.precision} on {args.backend}: {m.status}", file=out)
    print(f"  engine: {entry.artifact_path} ({m.artifact_size / 1e6:.2f} MB, sha256 {m.artifact_sha256[:16]}...)",
          file=out)
    if m.details.get("int8_layers"):
        print(f"  int8 layers: {m.details['int8_layers']}", file=out)
    v = m.verification_result
    if v is not None:
        print(f"  verification: {v.summary()}", file=out)
    if m.reason and (v is None or v.passed):
        print(f"  note: {m.reason}", file=out)
    return 0 if m.status == "ok" else 2


def _calibrate(args, out) -> int:
    from avatar_app.inference.calibration import MIN_USER_SAMPLES, CalibrationStore
    from avatar_app.inference.modelinfo import ModelInfo, load_feed_set

    path = resolve_model(args.model)
    info = ModelInfo.from_onnx(path)
    store = CalibrationStore(info.name)
    if args.clear:
        n = store.clear()
        print(f"deleted {n} sample file(s) of {info.name} from {store.folder}", file=out)
        return 0
    for f in args.add:
        data = load_feed_set(f, info.inputs)
        saved = store.add(data)
        print(f"added {next(iter(data.values())).shape[0]} samples from {f} -> {saved}", file=out)
    count = store.count(info)
    default = "yes" if info.calibration_path.is_file() else "no"
    print(f"{info.name}: {count} samples of your own in {store.folder}; default set shipped: {default}",
          file=out)
    if count < MIN_USER_SAMPLES:
        print(f"  record at least {MIN_USER_SAMPLES} samples for a calibration on your own data "
              f"({MIN_USER_SAMPLES - count} more)", file=out)
    print("  INT8 engines built from now on use the default set plus these samples "
          "('engines build --precision int8')", file=out)
    return 0


def _clear(args, out) -> int:
    from avatar_app.inference.cache import EngineCache

    cache = EngineCache()
    where = None
    if args.unused:
        shipped, here = _shipped_model_hashes(), _backends_here()
        where = lambda entry: _unused_reason(entry, shipped, here) is not None  # noqa: E731
    n, freed = cache.clear(args.model, where)
    forgotten = 0 if args.unused else cache.clear_failures(args.model)
    print(f"removed {n} {'unused ' if args.unused else ''}cached engine(s) ({freed / 1e6:.1f} MB) "
          f"from {cache.engines_dir}" + (f"; forgot {forgotten} failed build(s)" if forgotten else ""), file=out)
    return 0
