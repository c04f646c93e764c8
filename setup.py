"""Package discovery for setuptools (all metadata lives in pyproject.toml).

Code packages are found automatically; the top-level ``assets/`` and
``models/`` folders are installed inside the package as ``avatar_app.assets``
and ``avatar_app.models`` (with their subfolders), where
``avatar_app.resources.resource_path`` finds them.
"""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
DATA_DIRS = {"avatar_app.assets": "assets", "avatar_app.models": "models"}


def package_dirs() -> dict[str, str]:
    """``{package name: folder}`` for the data folders and each of their subfolders."""
    out = {}
    for pkg, folder in DATA_DIRS.items():
        out[pkg] = folder
        for d in sorted((ROOT / folder).rglob("*")):
            if d.is_dir() and d.name != "__pycache__":
                rel = d.relative_to(ROOT / folder)
                out[".".join((pkg, *rel.parts))] = "/".join((folder, *rel.parts))
    return out


def package_list() -> list[str]:
    """Every code package under avatar_app/ plus the data packages."""
    return find_packages(include=["avatar_app", "avatar_app.*"]) + list(package_dirs())


if __name__ == "__main__":
    dirs = package_dirs()
    setup(
        packages=package_list(),
        package_dir=dirs,
        package_data={pkg: ["*"] for pkg in dirs},
    )
