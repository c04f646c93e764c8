"""Make the speech2face training/validation data: synthetic aligned speech, augmented, seeded.

Usage::

    python -m training.speech.make_data --out ~/.cache/avatar_app/speech_data [--scale 1.0]

Writes ``train.npz`` (espeak-ng + festival) and ``heldout.npz`` (flite: the
held-out synthesiser family) with

- ``features`` (F, 64) float16 log-mel (avatar_app.speech.mel.log_mel),
- ``targets`` (F, 52) float16 ARKit targets (coarticulated, at each frame's time
  minus the 20 ms look-ahead),
- ``labels`` (F,) int8 viseme ids (Oculus set), ``offsets`` (E + 1,) int64 example
  boundaries, ``family``/``voice`` (E,) strings.

Every example: non-speech (silence, room noise, breath, clicks, music) - speech
- non-speech [- speech - non-speech]; utterances warped (VTLP-like resampling,
factor 0.87-1.15), then reverb, band-limit, noise (white/pink/babble, SNR
0-30 dB) and gain (-30..+6 dB) each with some probability. The same seed gives
the same files.
"""
from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np

from avatar_app.speech.mel import log_mel
from training.speech import augment as aug
from training.speech.phonemes import to_viseme_segments
from training.speech.derive_visemes import load_table
from training.speech.targets import frame_times, viseme_targets

log = logging.getLogger("make_data")
SR = 16000
LOOKAHEAD_S = 0.02
#: viseme -> ARKit table: fitted on the face model when derive_visemes.py saved one, else HAND_TABLE
TABLE = load_table()

ESPEAK_LANGS = ["en-us", "en", "en-gb-scotland", "en-us-nyc", "en-029", "de", "es", "fr", "it",
                "pt", "pt-br", "nl", "pl", "cs", "fi", "sv", "id", "tr", "sw", "ja", "hu", "ro"]
ESPEAK_VARIANTS = ["", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5",
                   "klatt", "klatt2", "klatt3", "adam", "Alicia", "Andrea", "benjamin", "caleb",
                   "david", "linda", "iven", "Michael", "max", "grandma", "grandpa", "edward"]
FESTIVAL = ["kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts"]
FLITE = ["kal16", "awb", "rms", "slt"]

_KANA = ("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわん"
         "がぎぐげござじずぜぞだでどばびぶべぼぱぴぷぺぽ")
_CONS = "bcdfghjklmnprstvwz"
_VOW = "aeiou"


def english_words() -> list[str]:
    """Plain words of the CMU pronouncing dictionary shipped with pocketsphinx."""
    import pocketsphinx

    path = Path(pocketsphinx.get_model_path()) / "en-us" / "cmudict-en-us.dict"
    words = []
    for line in path.read_text(errors="ignore").splitlines():
        w = line.split(" ", 1)[0]
        if w.isalpha() and 2 <= len(w) <= 10:
            words.append(w)
    return sorted(set(words))


def make_text(lang: str, rng: np.random.Generator, words: list[str]) -> str:
    """A random sentence: English dictionary words, or pseudo-words for other languages."""
    n = int(rng.integers(3, 11))
    if lang.startswith("en") or lang in ("festival", "flite"):
        toks = [words[rng.integers(len(words))] for _ in range(n)]
    elif lang == "ja":
        toks = ["".join(_KANA[rng.integers(len(_KANA))] for _ in range(rng.integers(2, 5)))
                for _ in range(n)]
        return "、".join(toks) + "。"
    else:
        toks = ["".join(_CONS[rng.integers(len(_CONS))] + _VOW[rng.integers(len(_VOW))]
                        for _ in range(rng.integers(1, 4))) for _ in range(n)]
    out = []
    for i, t in enumerate(toks):
        out.append(t)
        if i < n - 1 and rng.random() < 0.12:
            out[-1] += ","
    return " ".join(out) + rng.choice([".", ".", "?", "!"])


_ESPEAK = None


def _synth_one(spec: dict):
    """Worker: synthesise one utterance spec -> (audio, viseme segments, family, voice)."""
    global _ESPEAK
    from training.speech import synth

    fam = spec["family"]
    try:
        if fam == "espeak":
            if _ESPEAK is None:
                _ESPEAK = synth.Espeak()
            u = _ESPEAK.synth(spec["text"], spec["voice"], spec["rate"], spec["pitch"], spec["range"])
        elif fam == "festival":
            u = synth.festival_synth(spec["text"], spec["voice"], spec["stretch"])
        else:
            u = synth.flite_synth(spec["text"], spec["voice"], spec["stretch"])
    except Exception as exc:  # noqa: BLE001 - a failing synthesiser call drops one utterance
        log.warning("synthesis failed for %s: %s", spec, exc)
        return None
    if len(u.audio) < SR // 5 or not u.phones:
        return None
    return u.audio, to_viseme_segments(u.phones, fam), fam, spec["voice"]


def utterance_specs(family: str, n: int, rng: np.random.Generator, words: list[str]) -> list[dict]:
    """Random synthesis settings for ``n`` utterances of one family."""
    specs = []
    for _ in range(n):
        if family == "espeak":
            lang = ESPEAK_LANGS[rng.integers(len(ESPEAK_LANGS))]
            if rng.random() < 0.5:
                lang = "en-us" if rng.random() < 0.6 else "en"
            var = ESPEAK_VARIANTS[rng.integers(len(ESPEAK_VARIANTS))]
            specs.append({"family": family, "voice": lang + ("+" + var if var else ""),
                          "text": make_text(lang, rng, words), "rate": int(rng.integers(120, 230)),
                          "pitch": int(rng.integers(15, 85)), "range": int(rng.integers(10, 90))})
        else:
            voices = FESTIVAL if family == "festival" else FLITE
            specs.append({"family": family, "voice": voices[rng.integers(len(voices))],
                          "text": make_text(family, rng, words), "stretch": float(rng.uniform(0.8, 1.35))})
    return specs


def _speech_level(x: np.ndarray) -> float:
    """RMS over the louder half of 20 ms blocks (ignores pauses)."""
    n = len(x) // 320
    if n == 0:
        return aug.rms(x)
    b = np.sqrt(np.mean(x[: n * 320].reshape(n, 320).astype(np.float64) ** 2, axis=1))
    return float(np.sqrt(np.mean(np.sort(b)[n // 2:] ** 2)))


def build_example(utts: list, rng: np.random.Generator, babble: list[np.ndarray]):
    """Compose and augment one example from 0-2 utterances -> (features, targets, labels)."""
    parts, segs, pos = [], [], 0

    def gap(lo, hi):
        nonlocal pos
        n = int(rng.uniform(lo, hi) * SR)
        y, _ = aug.non_speech(n, rng)
        parts.append(y)
        pos += n

    gap(0.15, 1.2)
    for audio, vsegs, _, _ in utts:
        f = rng.uniform(0.87, 1.15) if rng.random() < 0.8 else 1.0
        y = aug.warp(audio, f) if f != 1.0 else audio
        y = y * (0.1 / max(_speech_level(y), 1e-6))
        t0 = pos / SR
        segs += [(t0 + a / f, t0 + b / f, v) for a, b, v in vsegs]
        parts.append(y.astype(np.float32))
        pos += len(y)
        gap(0.1, 1.0)
    x = np.concatenate(parts).astype(np.float32)
    if not utts:  # non-speech only: longer, mixes of kinds
        x = x + aug.non_speech(len(x), rng)[0]
    if rng.random() < 0.3:
        x = aug.reverb(x, rng)
    if rng.random() < 0.3:
        x = aug.band_limit(x, rng)
    if utts and rng.random() < 0.7:
        x = aug.add_noise(x, 0.1, rng, babble)
    x = x * 10 ** (rng.uniform(-30.0, 6.0) / 20)
    if rng.random() < 0.05:
        x = np.tanh(x * rng.uniform(1.0, 4.0)) / np.tanh(rng.uniform(1.0, 4.0))
    x = np.clip(x, -1.0, 1.0).astype(np.float32)
    feats = log_mel(x)
    targets, labels = viseme_targets(segs, frame_times(len(feats), LOOKAHEAD_S), TABLE)
    return feats, targets, labels


def make_split(name: str, families: dict[str, int], n_examples: int, seed: int, out: Path,
               words: list[str], workers: int) -> None:
    """Synthesise the utterance pool of ``families`` and write ``out/name.npz``."""
    rng = np.random.default_rng(seed)
    specs = []
    for fam, n in families.items():
        specs += utterance_specs(fam, n, rng, words)
    t0 = time.time()
    with mp.Pool(workers) as pool:
        pool_out = [u for u in pool.map(_synth_one, specs, chunksize=8) if u is not None]
    log.info("%s: %d utterances synthesised in %.0f s", name, len(pool_out), time.time() - t0)
    babble = [u[0] for u in pool_out[:200]]
    order = rng.permutation(len(pool_out))
    feats, targs, labs, offsets, fams, voices = [], [], [], [0], [], []
    k = 0
    for e in range(n_examples):
        erng = np.random.default_rng([seed, e])
        if erng.random() < 0.08:
            utts = []
        else:
            m = 1 if erng.random() < 0.6 else 2
            utts = [pool_out[order[(k + j) % len(order)]] for j in range(m)]
            k += m
        f, t, lab = build_example(utts, erng, babble)
        feats.append(f.astype(np.float16))
        targs.append(t.astype(np.float16))
        labs.append(lab.astype(np.int8))
        offsets.append(offsets[-1] + len(f))
        fams.append(utts[0][2] if utts else "none")
        voices.append(utts[0][3] if utts else "none")
    np.savez(out / f"{name}.npz", features=np.concatenate(feats), targets=np.concatenate(targs),
             labels=np.concatenate(labs), offsets=np.array(offsets, np.int64),
             family=np.array(fams), voice=np.array(voices))
    log.info("%s: %d examples, %.1f min of audio, %.0f s", name, n_examples,
             offsets[-1] / 100 / 60, time.time() - t0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache/avatar_app/speech_data")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply all counts")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    a.out.mkdir(parents=True, exist_ok=True)
    words = english_words()
    s = a.scale
    make_split("heldout", {"flite": int(240 * s)}, int(240 * s), a.seed + 1, a.out, words, a.workers)
    make_split("train", {"espeak": int(1500 * s), "festival": int(600 * s)}, int(2400 * s), a.seed,
               a.out, words, a.workers)


if __name__ == "__main__":
    main()
