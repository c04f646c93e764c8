"""README's apt line installs what .ci/run installs, and runs without sudo (issue 21, item 1)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_APT = """#!/bin/sh
echo "$@" >> "$APT_LOG"
"""


def _fake_bin(tmp_path: Path, *, sudo: bool) -> Path:
    """A folder with a recording apt-get (and sudo passing through when asked) and a python3 that fails,
    so .ci/run stops after its apt part."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {"apt-get": FAKE_APT, "python3": "#!/bin/sh\nexit 7\n"}
    if sudo:
        tools["sudo"] = '#!/bin/sh\necho sudo >> "$APT_LOG"\nexec "$@"\n'
    for name, body in tools.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _installed(log: Path) -> list[str]:
    installs = [ln.split() for ln in log.read_text().splitlines() if ln.split()[:1] == ["install"]]
    assert len(installs) == 1, log.read_text()
    return [tok for tok in installs[0][1:] if not tok.startswith("-")]


def _readme_setup_command() -> str:
    """The shell command in README's Set-up section that runs apt-get install."""
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [span for ln in setup.splitlines() if "apt-get install" in ln
                for span in (re.findall(r"`([^`]*apt-get install[^`]*)`", ln) or [ln.strip()])]
    assert len(commands) == 1, commands
    return commands[0]


def test_ci_installs_exactly_what_readme_installs(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    if (ROOT / "packaging").is_dir():
        shutil.copytree(ROOT / "packaging", tmp_path / "packaging")
    log = tmp_path / "apt.log"
    env = {**os.environ, "APT_LOG": str(log), "PATH": f"{_fake_bin(tmp_path, sudo=True)}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], check=False, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 7, proc.stderr  # stopped at python3, after the apt part
    ci = _installed(log)
    assert {"xvfb", "xauth", "libxcb-cursor0", "libxkbcommon-x11-0"} <= set(ci)
    readme = shlex.split(_readme_setup_command())
    inner = shlex.split(readme[-1]) if readme[-1].count(" ") > 2 else readme  # sh -c '... install PKGS'
    assert sorted(tok for tok in inner[inner.index("install") + 1:] if not tok.startswith("-")) == sorted(ci)


def test_readme_apt_line_runs_as_root_without_sudo(tmp_path):
    """A root shell in a container has no sudo: the line must still update and install."""
    command = _readme_setup_command()
    assert not command.startswith("sudo "), command
    bin_dir = _fake_bin(tmp_path, sudo=False)
    os.symlink(shutil.which("sh"), bin_dir / "sh")  # PATH holds only this folder: no sudo anywhere
    log = tmp_path / "apt.log"
    proc = subprocess.run(["/bin/bash", "-c", command], check=False, env={"APT_LOG": str(log), "PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update" and len(_installed(log)) > 20, calls


def test_readme_apt_line_uses_sudo_where_it_exists(tmp_path):
    bin_dir = _fake_bin(tmp_path, sudo=True)
    os.symlink(shutil.which("sh"), bin_dir / "sh")
    log = tmp_path / "apt.log"
    proc = subprocess.run(["/bin/bash", "-c", _readme_setup_command()], check=False,
                          env={"APT_LOG": str(log), "PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines()[0] == "sudo"


def test_readme_line_is_generated_from_the_list():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_apt_packages", ROOT / "packaging" / "apt_packages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert _readme_setup_command() == mod.apt_line(), "run: python packaging/apt_packages.py --write"
    assert len(set(mod.packages())) == len(mod.packages())
