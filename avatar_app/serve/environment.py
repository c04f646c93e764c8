"""The environment the Triton server process needs: the interpreter's own libpython first.

pytriton's Python-backend stub (``triton_python_backend_stub``, one process per
served model) embeds Python by loading ``libpython3.X.so`` through the dynamic
linker. A venv made from a Python that is not the system's (pyenv, a
self-built or conda Python) then gets the *system's* libpython of the same
minor version if there is one: with pyenv's 3.11.7 on Debian the stub loaded
Debian's 3.11.2 and failed inside ``multiprocessing`` with
"'_thread.RLock' object has no attribute '_recursion_count'" (checked in
issue 20). Putting ``<sys.base_prefix>/lib``, where such interpreters keep
their shared library, first on ``LD_LIBRARY_PATH`` makes the stub load the
same interpreter as the server process.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import MutableMapping
from pathlib import Path


def libpython_name() -> str:
    """The shared library the stub asks the dynamic linker for: ``libpython3.11.so.1.0``."""
    return sysconfig.get_config_var("INSTSONAME") or f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"


def interpreter_lib_dir() -> Path | None:
    """The folder holding this interpreter's own libpython, or None when it has none there.

    Looks in ``sysconfig``'s LIBDIR and ``<sys.base_prefix>/lib``; a Python built
    without ``--enable-shared`` (no libpython) gives None. For Debian's system
    Python it is the system library folder, where the linker looks anyway.
    """
    name = libpython_name()
    for cand in (sysconfig.get_config_var("LIBDIR"), str(Path(sys.base_prefix) / "lib")):
        if cand and (Path(cand) / name).is_file():
            return Path(cand)
    return None


def stub_environment(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Put this interpreter's libpython folder first on ``LD_LIBRARY_PATH`` (Linux).

    Args:
        env: the environment to change (default: ``os.environ``, which pytriton copies
            for the ``tritonserver`` process it starts).

    Returns:
        ``env``, changed in place (unchanged on other systems or when the folder is
        already first, or the interpreter has no shared library).
    """
    env = os.environ if env is None else env
    lib = interpreter_lib_dir()
    if lib is None or not sys.platform.startswith("linux"):
        return env
    parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if parts and Path(parts[0]) == lib:
        return env
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(lib)] + [p for p in parts if Path(p) != lib])
    return env
