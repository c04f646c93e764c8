"""`avatar-app serve` stopped by SIGTERM to its process group after serving: a clean stop, no shared
memory leaked or reported leaked (issue 21, trial fixes 5)."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest
from serve_fixtures import ServeProcess, needs_pytriton

pytestmark = [pytest.mark.slow, pytest.mark.gl, needs_pytriton]


def _segments() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.iterdir()} if shm.is_dir() else set()


def _mapped_by_other_processes() -> set[str]:
    """Names of /dev/shm segments that a live process other than this one maps (e.g. the server of a
    serve test running on the other xdist worker): those are not this server's leak."""
    import os

    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        if maps.parent.name == str(os.getpid()):
            continue
        try:
            text = maps.read_text()
        except OSError:  # the process ended, or is not ours to read
            continue
        names |= {ln.rsplit("/dev/shm/", 1)[1].split()[0] for ln in text.splitlines() if "/dev/shm/" in ln}
    return names


def _leaked(before: set[str]) -> set[str]:
    """Segments new since ``before`` that Python's shared_memory (``psm_``) or the app (``avatar_app_``)
    made and that no other live process maps (JACK's ``jack_db-*`` of an audio test is not ours)."""
    new = {n for n in _segments() - before if n.startswith(("psm_", "avatar_app_"))}
    return new - _mapped_by_other_processes()


def test_sigterm_to_the_group_stops_cleanly_without_leaked_shared_memory(tmp_path, monkeypatch, short_grid_clip):
    """``short_grid_clip``: grid_s1_bbaf2n's first 0.4 s (conftest)."""
    from avatar_app.serve.remote_render import render_file_remote
    from avatar_app.pipeline import RenderOptions

    clip = short_grid_clip
    before = _segments()
    server = ServeProcess(tmp_path / "cache", args=("--backend", "ort_cpu"), own_group=True).start()
    try:
        monkeypatch.setenv("AVATAR_APP_CACHE_DIR", str(server.cache_dir))
        opts = RenderOptions(size=(96, 64), face="engine")  # both engines serve requests (both use shared memory)
        rep = render_file_remote(server.url, clip, tmp_path / "out.mp4", opts)
        assert "on remote" in rep.speech_backend and rep.frames_out > 0
    finally:
        status = server.stop_group(signal.SIGTERM)
    out = "\n".join(server.lines + server.errors)
    assert status == 0, out
    assert "leaked shared_memory" not in out and "resource_tracker" not in out, out
    assert "stopping" in out
    leaked = _leaked(before)
    assert not leaked, leaked
