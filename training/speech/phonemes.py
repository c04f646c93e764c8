"""Phone symbols of espeak-ng, festival and flite -> Oculus visemes (avatar_app.speech.visemes).

espeak-ng prints its own ASCII phoneme mnemonics (close to Kirshenbaum's ASCII
IPA: ``tS`` = tʃ, ``T`` = θ, ``N`` = ŋ, ``@`` = ə, ``**`` a tap, ``:`` length);
festival's and flite's US English voices use the CMU/radio phone set (``aa``,
``ae``, ``hh``...), the one of the CMU pronouncing dictionary, which
pocketsphinx also uses. Diphthongs become two visemes (first 60 % / last 40 %
of the phone). /h/ takes the viseme of the next phone (it has no lip shape
of its own). ``HH`` below marks that.
"""
from __future__ import annotations

from avatar_app.speech.visemes import VISEMES

HH = "hh"  # placeholder: copy the following phone's viseme

# CMU / radio phone set (festival, flite, pocketsphinx); stress digits are stripped.
CMU: dict[str, tuple[str, ...]] = {
    "aa": ("aa",), "ae": ("aa",), "ah": ("aa",), "ao": ("oh",), "aw": ("aa", "ou"),
    "ax": ("E",), "axr": ("RR",), "ay": ("aa", "ih"), "eh": ("E",), "er": ("RR",),
    "ey": ("E", "ih"), "ih": ("ih",), "ix": ("ih",), "iy": ("ih",), "ow": ("oh", "ou"),
    "oy": ("oh", "ih"), "uh": ("ou",), "uw": ("ou",),
    "b": ("PP",), "p": ("PP",), "m": ("PP",), "em": ("PP",),
    "f": ("FF",), "v": ("FF",), "th": ("TH",), "dh": ("TH",),
    "t": ("DD",), "d": ("DD",), "dx": ("DD",), "k": ("kk",), "g": ("kk",), "ng": ("kk",),
    "ch": ("CH",), "jh": ("CH",), "sh": ("CH",), "zh": ("CH",), "s": ("SS",), "z": ("SS",),
    "n": ("nn",), "en": ("nn",), "nx": ("nn",), "l": ("nn",), "el": ("nn",), "r": ("RR",),
    "w": ("ou",), "y": ("ih",), "hh": (HH,), "hv": (HH,),
    "pau": ("sil",), "h#": ("sil",), "sil": ("sil",), "brth": ("sil",), "+nsn+": ("sil",),
    "+spn+": ("sil",),
}

# espeak-ng mnemonics: exact multi-character symbols first, then by first character.
_ESPEAK_EXACT: dict[str, tuple[str, ...]] = {
    "tS": ("CH",), "dZ": ("CH",), "ts": ("SS",), "dz": ("SS",), "**": ("RR",),
    "aI": ("aa", "ih"), "aU": ("aa", "ou"), "eI": ("E", "ih"), "oU": ("oh", "ou"),
    "OI": ("oh", "ih"), "e@": ("E", "E"), "i@": ("ih", "E"), "U@": ("ou", "E"),
    "A@": ("aa", "E"), "O@": ("oh", "E"), "aI@": ("aa", "ih"), "aU@": ("aa", "ou"),
    "@U": ("E", "ou"), "3:": ("RR",), "3": ("E",), "@L": ("nn",), "l/": ("nn",),
    "d_z\\": ("CH",), "t_s\\": ("CH",), "t_s": ("SS",), "8": ("oh",), ";": ("sil",),
}
_ESPEAK_FIRST: dict[str, str] = {
    "p": "PP", "b": "PP", "m": "PP", "f": "FF", "v": "FF", "F": "FF", "T": "TH", "D": "TH",
    "t": "DD", "d": "DD", "k": "kk", "g": "kk", "N": "kk", "x": "kk", "G": "kk", "Q": "kk",
    "q": "kk", "c": "kk", "S": "CH", "Z": "CH", "s": "SS", "z": "SS", "C": "SS", "n": "nn",
    "l": "nn", "L": "nn", "J": "nn", "r": "RR", "R": "RR", "*": "RR", "h": HH, "j": "ih",
    "w": "ou", "a": "aa", "A": "aa", "V": "aa", "&": "aa", "@": "E", "e": "E", "E": "E",
    "i": "ih", "I": "ih", "y": "ou", "Y": "oh", "W": "oh", "o": "oh", "O": "oh", "0": "oh",
    "u": "ou", "U": "ou", "_": "sil", "?": "sil", "'": "sil", ",": "sil", "B": "FF",
}


def cmu_visemes(symbol: str) -> tuple[str, ...]:
    """Visemes of a CMU/radio phone (``aa1`` -> ``('aa',)``; unknown -> ``('sil',)``)."""
    s = symbol.lower().rstrip("012")
    return CMU.get(s, ("sil",))


def espeak_visemes(symbol: str) -> tuple[str, ...]:
    """Visemes of an espeak-ng phoneme mnemonic (``u:`` -> ``('ou',)``)."""
    s = symbol.strip()
    if s in _ESPEAK_EXACT:
        return _ESPEAK_EXACT[s]
    core = s.rstrip(":;#~-!^")
    if core in _ESPEAK_EXACT:
        return _ESPEAK_EXACT[core]
    if not core:
        return ("sil",)
    # a vowel followed by another vowel letter is a diphthong we do not list: split it
    first = _ESPEAK_FIRST.get(core[0], "sil")
    if len(core) >= 2 and first in ("aa", "E", "ih", "oh", "ou"):
        second = _ESPEAK_FIRST.get(core[1])
        if second in ("aa", "E", "ih", "oh", "ou") and second != first:
            return (first, second)
    return (first,)


def to_viseme_segments(phones: list[tuple[float, float, str]], family: str
                       ) -> list[tuple[float, float, int]]:
    """Phone segments -> viseme segments (start_s, end_s, viseme id).

    Args:
        phones: (start_s, end_s, symbol) in the family's phone set.
        family: "espeak" for espeak-ng mnemonics; anything else uses the CMU set.

    Returns:
        Viseme segments in time order; /h/ takes the next segment's viseme.
    """
    fn = espeak_visemes if family == "espeak" else cmu_visemes
    segs: list[tuple[float, float, str]] = []
    for t0, t1, sym in phones:
        vs = fn(sym)
        if len(vs) == 1:
            segs.append((t0, t1, vs[0]))
        else:
            tm = t0 + 0.6 * (t1 - t0)
            segs += [(t0, tm, vs[0]), (tm, t1, vs[1])]
    out: list[tuple[float, float, int]] = []
    for i, (t0, t1, v) in enumerate(segs):
        if v == HH:
            nxt = next((s[2] for s in segs[i + 1:] if s[2] != HH), "sil")
            v = nxt
        out.append((t0, t1, VISEMES.index(v)))
    return out
