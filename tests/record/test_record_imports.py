"""record/ has no import cycles inside it (issue 16: alpha <-> formats, recorder <-> async_recorder) and imports
no other stage (record -> outputs)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "avatar_app" / "record"


def _imports(path: Path) -> set[str]:
    """Modules of avatar_app.record that ``path`` imports, at any depth (functions, ``__getattr__`` too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {n.split(".")[2] for n in names if n.startswith("avatar_app.record.") and len(n.split(".")) > 2}
    return out


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(PKG / f"{m}.py") & mods - {m} for m in mods}


def test_record_modules_import_each_other_without_cycles():
    graph = _graph()
    assert "recorder" in graph and "alpha" in graph and "recorder" in graph["alpha"]  # the scan sees imports
    cycles = []

    def visit(node, path):
        for nxt in sorted(graph[node]):
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            else:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)


def test_open_recorder_is_where_callers_find_it():
    from avatar_app.record import AlphaClipRecorder, ClipRecorder, open_recorder
    from avatar_app.record.factory import open_recorder as factory_open

    assert open_recorder is factory_open and ClipRecorder and AlphaClipRecorder


def test_record_imports_no_other_stage():
    """DESIGN: stages depend on core/ only (what record/ shares with outputs/ lives in core.rotations)."""
    stages = ("capture", "tracking", "reconstruction", "speech", "outputs", "fusion", "pipeline", "ui")
    found = []
    for path in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                    else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.name}: {m}" for m in mods if m.split(".")[:2] in (["avatar_app", s] for s in stages)]
    assert not found, found

