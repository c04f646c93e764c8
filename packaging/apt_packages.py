"""README's apt line, generated from packaging/apt-packages.txt (the list .ci/run installs).

    python packaging/apt_packages.py           # print the line
    python packaging/apt_packages.py --write   # rewrite it in README.md
    python packaging/apt_packages.py --check   # exit 1 when README.md's line differs

The line works as a user with sudo, as root and in a container without sudo:
``$(command -v sudo)`` expands to nothing where sudo is absent.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "packaging" / "apt-packages.txt"
README = ROOT / "README.md"
# README's line sits in an indented code block; it is recognised by this prefix.
PREFIX = "$(command -v sudo) sh -c 'apt-get update && apt-get install -y --no-install-recommends"
_LINE = re.compile(r"^(?P<indent>[ \t]*)" + re.escape(PREFIX) + r" [^\n]*$", re.MULTILINE)


def packages(path: Path = LIST) -> list[str]:
    """The package names in ``path``, in order (``#`` starts a comment, blank lines are skipped)."""
    names = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        names.extend(raw.split("#", 1)[0].split())
    return names


def apt_line(names: list[str] | None = None) -> str:
    """The one-line install command for ``names`` (default: the list file)."""
    return f"{PREFIX} {' '.join(packages() if names is None else names)}'"


def readme_line(text: str) -> str | None:
    """README's apt line (without its indent), or None when README has none."""
    m = _LINE.search(text)
    return m.group(0).strip() if m else None


def write_readme(path: Path = README) -> bool:
    """Replace README's apt line with the generated one; True when the file changed.

    Raises:
        ValueError: README has no apt line to replace.
    """
    text = path.read_text(encoding="utf-8")
    m = _LINE.search(text)
    if m is None:
        raise ValueError(f"{path} has no line starting with {PREFIX!r}")
    new = text[:m.start()] + m.group("indent") + apt_line() + text[m.end():]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite README.md's apt line")
    group.add_argument("--check", action="store_true", help="exit 1 when README.md's apt line differs")
    args = ap.parse_args(argv)
    if args.write:
        print("README.md updated" if write_readme() else "README.md already up to date")
    elif args.check:
        if readme_line(README.read_text(encoding="utf-8")) != apt_line():
            print("README.md's apt line differs from packaging/apt-packages.txt; run "
                  "python packaging/apt_packages.py --write", file=sys.stderr)
            return 1
    else:
        print(apt_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
