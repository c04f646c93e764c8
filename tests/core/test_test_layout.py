"""The test suite's own layout (issue 16): tests/<package>/test_*.py, no test imports another test module."""
import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGES = {p.name for p in (TESTS.parent / "avatar_app").iterdir() if (p / "__init__.py").is_file()}


def _test_modules():
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_module_sits_in_a_package_folder():
    loose = [p.name for p in TESTS.glob("test_*.py")]
    assert not loose, f"test modules directly under tests/: {loose}"
    others = {p.parent.name for p in _test_modules()} - PACKAGES - {"cli", "packaging"}
    assert not others, f"test folders that name no avatar_app package: {sorted(others)}"


def test_no_test_imports_another_test_module():
    names = {p.stem for p in _test_modules()}
    bad = []
    for p in _test_modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            bad += [f"{p.relative_to(TESTS)} imports {m}" for m in mods if m.split(".")[-1] in names]
    assert not bad, bad


def test_rerun_status_messages_are_sent_at_once(request):
    """conftest.pytest_sessionstart: in an xdist worker run with --reruns, the socket to the
    controller's rerun status database has TCP_NODELAY (else 40 ms of delayed ACK per test);
    anywhere else the plugin keeps a database without a socket."""
    import os
    import socket

    sock = getattr(getattr(request.config, "failures_db", None), "sock", None)
    worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    if worker and request.config.getoption("reruns", None):
        assert isinstance(sock, socket.socket)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    else:
        assert not isinstance(sock, socket.socket) or sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
