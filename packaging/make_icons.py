#!/usr/bin/env python3
"""Render packaging/icons/avatar-app.svg to PNGs (16..512 px) and a Windows .ico.

Usage::

    python packaging/make_icons.py            # writes packaging/icons/avatar-app-<N>.png and avatar-app.ico
    python packaging/make_icons.py --out DIR

Uses Qt's SVG renderer (PySide6.QtSvg, part of PySide6 Essentials), so it
needs no extra package and no display (QGuiApplication on the ``offscreen``
platform). The .ico holds PNG-compressed images (Windows Vista and later).
"""
from __future__ import annotations

import argparse
import logging
import os
import struct
import sys
from pathlib import Path

logger = logging.getLogger("make_icons")

HERE = Path(__file__).resolve().parent
SVG = HERE / "icons" / "avatar-app.svg"
SIZES = (16, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 32, 48, 64, 128, 256)
"""ICO entries store sizes in one byte (256 written as 0), so 512 is left out."""


def render_png(svg_path: Path, size: int) -> bytes:
    """PNG bytes of ``svg_path`` rendered at ``size`` x ``size`` pixels, transparent background.

    Raises:
        ValueError: the SVG cannot be parsed.
    """
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg_path))
    if not renderer.isValid():
        raise ValueError(f"{svg_path} is not a valid SVG file")
    img = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    img.fill(0)
    painter = QPainter(img)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    img.convertToFormat(QImage.Format.Format_ARGB32).save(buf, "PNG")
    buf.close()
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A .ico file holding the given PNG images (size -> PNG bytes).

    Format: ICONDIR (reserved 0, type 1, count) + one 16-byte ICONDIRENTRY per
    image + the PNG data (Microsoft, "Icons" in the Win32 documentation; PNG
    entries are allowed since Windows Vista).
    """
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, blobs = [], []
    for s in sizes:
        blob = pngs[s]
        dim = 0 if s >= 256 else s
        entries.append(struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset))
        blobs.append(blob)
        offset += len(blob)
    return header + b"".join(entries) + b"".join(blobs)


def make_icons(out_dir: Path = HERE / "icons", svg_path: Path = SVG) -> list[Path]:
    """Write ``avatar-app-<N>.png`` for every size in :data:`SIZES` and ``avatar-app.ico``.

    Returns:
        The files written.
    """
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - QPainter needs one
    out_dir.mkdir(parents=True, exist_ok=True)
    written, pngs = [], {}
    for size in SIZES:
        png = render_png(svg_path, size)
        path = out_dir / f"avatar-app-{size}.png"
        path.write_bytes(png)
        written.append(path)
        if size in ICO_SIZES:
            pngs[size] = png
    ico = out_dir / "avatar-app.ico"
    ico.write_bytes(ico_bytes(pngs))
    written.append(ico)
    logger.info("wrote %s", ", ".join(p.name for p in written))
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "icons")
    p.add_argument("--svg", type=Path, default=SVG)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make_icons(args.out, args.svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
