"""The fidelity benchmark's figures as Markdown: one column per run (a path, baseline or now).

Used by ``benchmarks/fidelity.py`` (printed) and by the face_recon model card
(``training/face_recon/card.py``), which shows the real-face table of
``benchmarks/results/fidelity.json``.
"""
from __future__ import annotations

import json
from pathlib import Path

from avatar_app.evaluation import geometry as G


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def table(runs: dict[str, dict]) -> str:
    """A Markdown table: pooled r and gain (a), re-tracked r (b), per clip x feature r (a), winks,
    events, GRID jaw, fusion, London per group and bars met; one column per run.

    Args:
        runs: column title -> one :func:`~avatar_app.evaluation.benchmark.run_benchmark` result.

    Returns:
        Markdown text.
    """
    names = list(runs)
    lines = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    first = next(iter(runs.values()))
    for g in G.GROUPS:
        lines.append(f"| pooled r / gain: {g} | " + " | ".join(
            _f(r["label_free"]["pooled"].get(g, {}).get("r")) + " / "
            + _f(r["label_free"]["pooled"].get(g, {}).get("gain")) for r in runs.values()) + " |")
    lines.append("| lowest clip mean r | " + " | ".join(_f(r["label_free"]["min_clip_mean_r"])
                                                      for r in runs.values()) + " |")
    if all("retracked" in r for r in runs.values()):
        for g in ("eye_aperture", "lip_gap", "mouth_width", "corner_height", "brow_height", "eye_asymmetry"):
            lines.append(f"| re-tracked r: {g} | " + " | ".join(
                _f(r["retracked"]["pooled"].get(g, {}).get("r")) for r in runs.values()) + " |")
    for clip in first["label_free"]["clips"]:
        lines.append(f"| {clip}: mean r | " + " | ".join(
            _f(r["label_free"]["clips"].get(clip, {}).get("mean_r")) for r in runs.values()) + " |")
        for g in G.GROUPS:
            if g in G.POSE_FEATURES:
                continue
            vals = [r["label_free"]["clips"].get(clip, {}).get("features", {}).get(g, {}).get("r")
                    for r in runs.values()]
            if any(v is not None for v in vals):
                lines.append(f"| {clip}: {g} | " + " | ".join(_f(v) for v in vals) + " |")
    lines.append("| winks: frames ok | " + " | ".join(_f(r["winks"]["frames_ok"]) for r in runs.values()) + " |")
    for k in first.get("expressions", {}):
        lines.append(f"| event lift: {k} | " + " | ".join(
            _f(r["expressions"].get(k, {}).get("lift")) for r in runs.values()) + " |")
    for clip in first.get("jaw_in_words", {}):
        lines.append(f"| jawOpen words - silence: {clip} | " + " | ".join(
            _f(r["jaw_in_words"][clip]["lift"]) for r in runs.values()) + " |")
        face = first["jaw_in_words"][clip].get("face_lip_gap")
        if face:
            lines.append(f"| the face's own lip gap words - silence: {clip} (silence max) | "
                         + " | ".join(f"{_f(face['lift'])} ({_f(face['silence_max'])})" for _ in runs) + " |")
    for clip in first.get("fusion", {}):
        lines.append(f"| lip-gap r vision / fused: {clip} | " + " | ".join(
            _f(r["fusion"][clip]["vision_r"]) + " / " + _f(r["fusion"][clip]["fused_r"]) for r in runs.values()) + " |")
    if all("london" in r for r in runs.values()):
        lines.append("| London both ok | "
                     + " | ".join(_f(r["london"]["overall"]["both_ok"]) for r in runs.values()) + " |")
        for g in first["london"]["groups"]:
            lines.append(f"| London {g} (n={first['london']['groups'][g]['n']}) | " + " | ".join(
                _f(r["london"]["groups"][g]["both_ok"]) for r in runs.values()) + " |")
    lines.append("| bars met | " + " | ".join(
        f"{sum(b['met'] for b in r['bars'].values())} of {len(r['bars'])}" for r in runs.values()) + " |")
    return "\n".join(lines)


def results_table(path: Path) -> str:
    """The table of a results file (``benchmarks/results/fidelity.json``): baseline and current runs."""
    data = json.loads(Path(path).read_text())
    runs = {f"{k} (baseline)": v for k, v in data.get("baseline", {}).items()}
    runs.update({f"{k} (now)": v for k, v in data.get("current", {}).items()})
    return table(runs)


def card_section(path: Path) -> list[str]:
    """The model card's real-face section (Markdown lines) from a fidelity results file, or [] without one."""
    if not Path(path).is_file():
        return []
    return [
        "## Real faces (issue 17 benchmark: `benchmarks/fidelity.py`, `avatar_app/evaluation`)", "",
        ("Label-free, on every real video of ../shared/testdata: the face's visible geometry from MediaPipe's "
        "landmarks (eye aperture per eye, inner-lip gap, mouth width, mouth-corner height, brow height per side, "
        "one-eye asymmetry, head yaw/pitch/roll, each normalised by the eye span) against the same geometry on "
        "(a) the face model driven by the output blendshapes and identity and (b) the default head rendered with "
        "the output and tracked again by MediaPipe. r = Pearson, gain = least-squares slope; a feature enters a "
        "clip only where the face moves it beyond MediaPipe's jitter; pooled = within-clip demeaned frames of "
        "all clips. Events (winks, puckers, jaw drops, brow raises, ...) are this project's hand labels "
        "(tests/data/expressive_events.json); London = 71 people, neutral and smiling photos each read alone. "
        "Baseline = before the issue-17 work (the solver with linked eyes and feature-mapped mouth and brows); "
        "the engine is the shipped face_recon.onnx (unchanged)."), "",
        results_table(path), "",
        *engine_losses(json.loads(Path(path).read_text())), "",
    ]


def engine_losses(data: dict, margin: float = 0.01) -> list[str]:
    """Markdown lines naming where the engine is below the solver (current runs) by more than ``margin``."""
    cur = data.get("current", {})
    if "engine" not in cur or "solver" not in cur:
        return []
    e, s = cur["engine"], cur["solver"]
    worse = []
    for kind, key in (("pooled r (a)", "label_free"), ("re-tracked r (b)", "retracked")):
        for g, v in s.get(key, {}).get("pooled", {}).items():
            ev = e.get(key, {}).get("pooled", {}).get(g, {}).get("r")
            if ev is not None and v.get("r") is not None and ev < v["r"] - margin:
                worse.append(f"{kind} {g} {ev:.2f} vs {v['r']:.2f}")
    for clip, v in s["label_free"]["clips"].items():
        ev = e["label_free"]["clips"].get(clip, {}).get("mean_r")
        if ev is not None and v.get("mean_r") is not None and ev < v["mean_r"] - margin:
            worse.append(f"{clip} mean r {ev:.2f} vs {v['mean_r']:.2f}")
    for name in ("winks", "london", "blinks", "jaw_in_words"):
        a, b = e["bars"].get(name), s["bars"].get(name)
        if a and b and b["met"] and not a["met"]:
            worse.append(f"{name} bar ({a['value']} vs {b['value']})")
    return ["Where the engine loses to the solver (more than 0.01): "
            + ("; ".join(worse) if worse else "nowhere") + "."]
