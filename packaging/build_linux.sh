#!/usr/bin/env bash
# Build the Linux one-folder bundle: dist/avatar-app/avatar-app (+ _internal/).
# Usage: packaging/build_linux.sh [DIST_DIR] [WORK_DIR]
#   PYTHON=/path/to/python  the interpreter of a venv with avatar-app and pyinstaller installed
#                           (default: .venv/bin/python, else python3)
# The spec generates THIRD_PARTY_NOTICES.txt from what it bundles and copies it
# and LICENSE next to the executable.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="${1:-$ROOT/dist}"
WORK="${2:-$ROOT/build/pyinstaller}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
"$PY" -c "import PyInstaller" 2>/dev/null || { echo "error: PyInstaller is not installed in $PY (pip install pyinstaller)" >&2; exit 2; }
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level "${PYI_LOG_LEVEL:-WARN}" \
  --distpath "$DIST" --workpath "$WORK" "$ROOT/packaging/avatar_app.spec"
end=$(date +%s)
echo "bundle: $DIST/avatar-app ($(du -sh "$DIST/avatar-app" | cut -f1), built in $((end - start)) s)"
