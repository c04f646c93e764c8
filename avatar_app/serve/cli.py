"""``avatar-app serve``: the command line of the engine server.

The app's CLI adds it with :func:`add_serve_parser` and runs it with :func:`run_serve`.
Exit status: 0 after a stop by Ctrl+C (SIGINT) or SIGTERM, 1 when Triton stopped
by itself, 2 for bad options or a port in use (the CLI's error handling).
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TextIO

from avatar_app.core.errors import InputError


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, not {text!r}")
    return int(text)


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``serve`` command to an argparse subparsers object.

    Returns:
        The ``serve`` parser.
    """
    p = subparsers.add_parser(
        "serve", help="serve the engines on Triton Inference Server (for render --remote and other PCs)",
        description="Serve every shipped engine on Triton Inference Server with dynamic batching. "
                    "Loopback only unless --host says otherwise; there is no authentication.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 = every "
                        "IPv4 interface: anyone who reaches it can use the engines)")
    p.add_argument("--grpc-port", type=_port, default=8001, help="gRPC port (default 8001)")
    p.add_argument("--http-port", type=_port, default=8000, help="HTTP port: health, readiness (default 8000)")
    p.add_argument("--metrics-port", type=_port, default=8002, help="Prometheus metrics port (default 8002)")
    p.add_argument("--backend", default=None, help="backend of every engine (default: the fastest verified one; "
                                                   "see 'avatar-app engines list')")
    p.add_argument("--precision", default=None, choices=["fp32", "fp16", "int8"],
                   help="precision of every engine (default: the backend's first that passes verification)")
    p.add_argument("--engine", action="append", default=[], metavar="MODEL=BACKEND[/PRECISION]",
                   help="backend and precision of one model, e.g. face_recon=ort_cpu/int8 (repeatable)")
    p.add_argument("--max-queue-delay-us", type=int, default=1000,
                   help="longest wait of the dynamic batcher for more requests, microseconds (default 1000)")
    p.add_argument("--instances", type=int, default=1, help="engines per model (default 1)")
    return p


def _options(args):
    from avatar_app.inference.remote import BACKEND_NAME
    from avatar_app.serve.engines import EngineChoice, parse_engine_choice
    from avatar_app.serve.server import ServeOptions

    if args.max_queue_delay_us < 0:
        raise InputError(f"--max-queue-delay-us must be >= 0, not {args.max_queue_delay_us}")
    engines = dict(parse_engine_choice(t) for t in args.engine)
    default = EngineChoice(args.backend, args.precision)
    for choice in [default, *engines.values()]:
        if choice.backend == BACKEND_NAME:
            raise InputError("the server runs its engines itself: choose a local backend, not 'remote'")
        if choice.backend is not None:
            from avatar_app.inference.backends import get_backend

            get_backend(choice.backend)  # unknown names: one clear error
    return ServeOptions(host=args.host, grpc_port=args.grpc_port, http_port=args.http_port,
                        metrics_port=args.metrics_port, default=default, engines=engines,
                        max_queue_delay_us=args.max_queue_delay_us, instances=args.instances)


def _print_ready(server, out: TextIO) -> None:
    o = server.options
    print("serving:", file=out)
    for e in server.engines:
        r = e.runner
        batch = f"dynamic batching up to {e.max_batch_size}" if e.max_batch_size else "no batching"
        v = r.verification
        checked = f"; verified: {v.summary()}" if v is not None else " (the FP32 reference)"
        print(f"  {e.name:<12} {r.backend} {r.precision.value}, {batch}{checked}", file=out)
        asked = e.asked
        if (asked.backend and asked.backend != r.backend) or (asked.precision and asked.precision != r.precision.value):
            why = "; ".join(a.line() for a in e.result.attempts if not a.ok)
            print(f"      asked for {asked.backend or '-'}/{asked.precision or '-'}, not usable: {why}", file=out)
    for name, why in server.failed.items():
        print(f"  {name:<12} NOT SERVED: {why}", file=out)
    print(f"gRPC     {o.grpc_url}   (avatar-app render IN -o OUT --remote {o.grpc_url})", file=out)
    print(f"health   {o.http_url('/v2/health/ready')}", file=out)
    print(f"metrics  {o.metrics_url}", file=out)
    print(f"log      {server.log_path}", file=out)
    if o.exposed:
        print(f"warning: listening on {o.host}, not only this machine: there is no authentication, anyone "
              "who can reach these ports can use the engines (use a firewall or a private network)", file=out)
    print("ready; Ctrl+C stops", file=out, flush=True)


def run_serve(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``avatar-app serve`` until Ctrl+C or SIGTERM.

    Returns:
        0 after a stop by signal, 1 when Triton stopped by itself.

    Raises:
        AvatarError: bad options, a port in use, pytriton missing, no engine (the CLI prints it).
    """
    from avatar_app.serve.server import EngineServer

    out = out or sys.stdout
    options = _options(args)
    if options.exposed:
        from avatar_app.serve.server import check_port_free

        for port in (options.grpc_port, options.http_port, options.metrics_port):
            check_port_free(options.host, port)  # an address that cannot be bound fails before the warning
        print(f"warning: --host {options.host}: the engines will be reachable from other machines, and there "
              "is no authentication", file=out, flush=True)
    stop = threading.Event()
    server = EngineServer(options)
    hits = []
    starting = [True]

    def handle(signum, _frame):
        hits.append(signum)
        if starting[0]:  # engines may take minutes to build: stop now, not after
            raise KeyboardInterrupt
        if len(hits) > 1:  # a second Ctrl+C: no more waiting for in-flight requests
            server.kill()
            raise SystemExit(128 + signum)
        stop.set()

    old = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server.start(progress=lambda text: print(text, file=out, flush=True))
        except KeyboardInterrupt:
            print("stopped during start-up", file=out, flush=True)
            return 0
        finally:
            starting[0] = False
        _print_ready(server, out)
        stopped = server.wait(stop)
        if not stopped:
            print(f"error: Triton Inference Server stopped by itself; its log ({server.log_path}) ends: "
                  f"{server.log_tail()}", file=sys.stderr)
            return 1
        print("stopping", file=out, flush=True)
        return 0
    finally:
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
