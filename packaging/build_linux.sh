#!/usr/bin/env bash
# Build the Linux one-folder bundle: DIST/avatar-app/avatar-app (+ _internal/).
#
# Usage: packaging/build_linux.sh [--release] [DIST_DIR] [WORK_DIR]
#   (default DIST_DIR=dist, WORK_DIR=build/pyinstaller)
#
# Without --release: uses $PYTHON (default .venv/bin/python), the development venv
#   (what tests/test_packaging.py does).
# With --release: makes a clean venv (build/venv-release, or $RELEASE_VENV) holding
#   only avatar-app's run-time dependencies + PyInstaller, and swaps MediaPipe's
#   opencv-contrib-python for opencv-python-headless of the same version (avatar_app
#   and MediaPipe only use core OpenCV; the headless wheel has no Qt 5 copy): ~45 MB
#   smaller, and no test/training packages can leak into the bundle.
#
# The spec generates THIRD_PARTY_NOTICES.txt from what it bundles and copies it
# and LICENSE next to the executable.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RELEASE=0
if [ "${1:-}" = "--release" ]; then RELEASE=1; shift; fi
DIST="${1:-$ROOT/dist}"
WORK="${2:-$ROOT/build/pyinstaller}"
PY="${PYTHON:-}"
if [ "$RELEASE" = 1 ]; then
  VENV="${RELEASE_VENV:-$ROOT/build/venv-release}"
  BASE_PY="${PYTHON:-python3}"
  if [ ! -x "$VENV/bin/python" ]; then
    "$BASE_PY" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --upgrade "$ROOT" "pyinstaller>=6.10"
  CV_VER="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("opencv-contrib-python"))' 2>/dev/null || true)"
  if [ -n "$CV_VER" ]; then
    # Both wheels install into cv2/: uninstalling contrib deletes files of an already
    # installed headless (a re-run on an existing venv), so headless is always reinstalled.
    "$VENV/bin/python" -m pip uninstall -q -y opencv-contrib-python
    "$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "opencv-python-headless==$CV_VER"
  fi
  "$VENV/bin/python" -c "import cv2, mediapipe, onnxruntime, av, PySide6.QtWidgets" \
    || { echo "error: the release venv $VENV is broken (see above)" >&2; exit 2; }
  PY="$VENV/bin/python"
elif [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
"$PY" -c "import PyInstaller" 2>/dev/null || { echo "error: PyInstaller is not installed in $PY (pip install pyinstaller)" >&2; exit 2; }
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level "${PYI_LOG_LEVEL:-WARN}" \
  --distpath "$DIST" --workpath "$WORK" "$ROOT/packaging/avatar_app.spec"
end=$(date +%s)
echo "bundle: $DIST/avatar-app ($(du -sh "$DIST/avatar-app" | cut -f1), built in $((end - start)) s)"
