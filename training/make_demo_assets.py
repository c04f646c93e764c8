"""Make the demo's shipped speech clip: assets/demo/speech.ogg (Opus, mono 48 kHz).

Synthesises a short friendly English sentence with the espeak-ng formant
synthesiser (Debian package ``espeak-ng``), pads it with a little silence,
peak-normalises it and encodes it with PyAV to Opus in Ogg. Run once from the
repository root; the output is committed:

    .venv/bin/python training/make_demo_assets.py

The result is byte-identical between runs for a given espeak-ng and libopus
version (bit-exact Ogg muxing with a fixed stream serial).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import numpy as np

_log = logging.getLogger("make_demo_assets")

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Hi! I am your new avatar. I blink, I look around, and I talk when you talk."
VOICE = "en-us"
WORDS_PER_MINUTE = 140
OUT_RATE = 48000  # Opus works at 48 kHz internally
BITRATE = 32000  # bits/s: transparent enough for synthetic speech, ~30 kB for 7 s
LEAD_S, TAIL_S = 0.4, 0.6  # silence before and after the sentence
PEAK_DBFS = -3.0
MIN_S, MAX_S = 6.0, 10.0
MAX_BYTES = 200_000


def synthesise(text: str, wav_path: Path) -> None:
    """Run espeak-ng to write ``text`` as a 22.05 kHz mono WAV."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("espeak-ng is not installed (Debian/Ubuntu: apt-get install espeak-ng)")
    subprocess.run([exe, "-v", VOICE, "-s", str(WORDS_PER_MINUTE), "-w", str(wav_path), text],
                   check=True)


def read_mono(path: Path, rate: int) -> np.ndarray:
    """(N,) float32 mono at ``rate`` Hz, decoded and resampled with PyAV."""
    out = []
    with av.open(str(path)) as c:
        rs = av.AudioResampler(format="flt", layout="mono", rate=rate)
        for frame in c.decode(audio=0):
            out += [f.to_ndarray().reshape(-1) for f in rs.resample(frame)]
        out += [f.to_ndarray().reshape(-1) for f in rs.resample(None)]
    return np.concatenate(out).astype(np.float32)


def write_opus(samples: np.ndarray, rate: int, path: Path) -> None:
    """Encode (N,) float32 mono at ``rate`` Hz to Opus in Ogg."""
    options = {"fflags": "+bitexact", "serial_offset": "1"}  # same bytes on every run
    with av.open(str(path), "w", format="ogg", options=options) as c:
        st = c.add_stream("libopus", rate=rate, layout="mono")
        st.bit_rate = BITRATE
        c.metadata["title"] = "avatar_app demo speech"
        c.metadata["comment"] = f"espeak-ng -v {VOICE} -s {WORDS_PER_MINUTE}: {TEXT}"
        step = 960  # 20 ms
        for i in range(0, len(samples), step):
            chunk = samples[i:i + step]
            frame = av.AudioFrame.from_ndarray(chunk[None, :], format="flt", layout="mono")
            frame.sample_rate = rate
            frame.pts = i
            c.mux(st.encode(frame))
        c.mux(st.encode(None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "demo" / "speech.ogg")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        synthesise(TEXT, wav)
        x = read_mono(wav, OUT_RATE)
    x = x * (10 ** (PEAK_DBFS / 20) / max(1e-6, float(np.abs(x).max())))
    x = np.concatenate([np.zeros(int(LEAD_S * OUT_RATE), np.float32), x.astype(np.float32),
                        np.zeros(int(TAIL_S * OUT_RATE), np.float32)])
    seconds = len(x) / OUT_RATE
    if not MIN_S <= seconds <= MAX_S:
        sys.exit(f"speech is {seconds:.2f} s; expected {MIN_S}-{MAX_S} s (change the text or rate)")
    write_opus(x, OUT_RATE, args.out)
    size = args.out.stat().st_size
    if size > MAX_BYTES:
        sys.exit(f"{args.out} is {size} bytes; more than {MAX_BYTES}")
    _log.info("wrote %s: %.2f s, %d bytes", args.out, seconds, size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
