#!/usr/bin/env bash
# Install a built bundle (dist/avatar-app) for the current user:
#   ~/.local/opt/avatar-app/         the bundle
#   ~/.local/bin/avatar-app          a link to its executable
#   ~/.local/share/applications/     avatar-app.desktop (menu entry)
#   ~/.local/share/icons/hicolor/    the icons (16..512 px and scalable)
# Usage: packaging/linux/install.sh [BUNDLE_DIR]   (default: dist/avatar-app)
#        packaging/linux/install.sh --uninstall
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PKG="$(dirname "$HERE")"
PREFIX="${PREFIX:-$HOME/.local}"
ICONS="$PREFIX/share/icons/hicolor"
if [ "${1:-}" = "--uninstall" ]; then
  rm -rf "$PREFIX/opt/avatar-app" "$PREFIX/bin/avatar-app" "$PREFIX/share/applications/avatar-app.desktop"
  rm -f "$ICONS"/*/apps/avatar-app.png "$ICONS/scalable/apps/avatar-app.svg"
  echo "avatar-app uninstalled from $PREFIX"
  exit 0
fi
BUNDLE="${1:-$(dirname "$PKG")/dist/avatar-app}"
[ -x "$BUNDLE/avatar-app" ] || { echo "error: no bundle at $BUNDLE (build it with packaging/build_linux.sh)" >&2; exit 2; }
mkdir -p "$PREFIX/opt" "$PREFIX/bin" "$PREFIX/share/applications" "$ICONS/scalable/apps"
rm -rf "$PREFIX/opt/avatar-app"
cp -a "$BUNDLE" "$PREFIX/opt/avatar-app"
ln -sf "$PREFIX/opt/avatar-app/avatar-app" "$PREFIX/bin/avatar-app"
sed "s|^Exec=avatar-app|Exec=$PREFIX/bin/avatar-app|; s|^TryExec=avatar-app|TryExec=$PREFIX/bin/avatar-app|" \
  "$HERE/avatar-app.desktop" > "$PREFIX/share/applications/avatar-app.desktop"
for s in 16 32 48 64 128 256 512; do
  mkdir -p "$ICONS/${s}x${s}/apps"
  cp "$PKG/icons/avatar-app-$s.png" "$ICONS/${s}x${s}/apps/avatar-app.png"
done
cp "$PKG/icons/avatar-app.svg" "$ICONS/scalable/apps/avatar-app.svg"
command -v update-desktop-database >/dev/null && update-desktop-database -q "$PREFIX/share/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$ICONS" || true
echo "avatar-app installed in $PREFIX/opt/avatar-app (command: $PREFIX/bin/avatar-app)"
