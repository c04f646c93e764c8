"""ONNX Runtime's process-wide switches that must be set before ``import onnxruntime``.

ONNX Runtime (1.32 here) starts its telemetry when it is imported: it persists a
device ID under ``$XDG_CACHE_HOME`` (or ``~/.cache``) and, where that folder
cannot be written (a service user, a read-only home), prints an ANSI-coloured
warning on stderr ("Failed to persist telemetry device ID") that neither
``disable_telemetry_events()`` nor the logger's severity can stop, since both
come after the import. ONNX Runtime's own opt-out, the environment variable
``ORT_DISABLE_TELEMETRY=1``, is read at that import; it is set here unless the
user set it (``ORT_DISABLE_TELEMETRY=0`` keeps the telemetry on). Errors of
ONNX Runtime are unaffected: they are raised as exceptions and reworded by the
engine layer. Imported first by :mod:`avatar_app.inference`, the only package
that imports onnxruntime (import-linter contract).
"""
from __future__ import annotations

import os

#: ONNX Runtime's telemetry opt-out, read once when onnxruntime is imported.
TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"

os.environ.setdefault(TELEMETRY_ENV, "1")
