"""Train the speech2face TCN on the data of make_data.py (CPU, seeded).

Usage::

    python -m training.speech.train --data ~/.cache/avatar_app/speech_data --minutes 15

Writes ``model.pt`` (state dict + config) and ``metrics.json`` (held-out
family: viseme accuracy, jawOpen correlation, MAE) into the data folder.
Loss: L1 + MSE on the driven shapes, MSE on their frame-to-frame change
(smoothness), cross-entropy on the viseme head (weight 0.3).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.speech.mel import SILENCE_VALUE
from avatar_app.speech.visemes import VISEMES
from training.speech.model import OUT_INDEX, Speech2Face, n_params, set_normalisation

log = logging.getLogger("train")
JAW = BLENDSHAPE_NAMES.index("jawOpen")


def load(path: Path) -> dict:
    """Load a split written by make_data.py, or its uint8-quantised copy (``quantise``)."""
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    if "fq" in d:  # quantised: features (q / 6 + silence), driven targets q / 255
        d["features"] = (d.pop("fq").astype(np.float32) / 6.0 + SILENCE_VALUE).astype(np.float16)
        t = np.zeros((len(d["features"]), len(BLENDSHAPE_NAMES)), np.float16)
        t[:, OUT_INDEX] = d.pop("tq").astype(np.float32) / 255.0
        d["targets"] = t
    return d


def quantise(src: Path, dst: Path, keep: float = 1.0, seed: int = 0) -> None:
    """Write a compact uint8 copy of a split (for moving it to another machine).

    Features are quantised in steps of 1/6 (0.72 dB) from digital silence up;
    targets of the driven shapes in steps of 1/255; ``keep`` < 1 keeps that
    share of the examples (seeded).
    """
    d = load(src)
    off = d["offsets"]
    n_ex = len(off) - 1
    ex = np.sort(np.random.default_rng(seed).permutation(n_ex)[: int(round(n_ex * keep))])
    rows = np.concatenate([np.arange(off[e], off[e + 1]) for e in ex])
    lens = np.diff(off)[ex]
    f = d["features"][rows].astype(np.float32)
    np.savez_compressed(dst, fq=np.clip(np.round((f - SILENCE_VALUE) * 6), 0, 255).astype(np.uint8),
                        tq=np.clip(np.round(d["targets"][rows][:, OUT_INDEX].astype(np.float32) * 255),
                                   0, 255).astype(np.uint8),
                        labels=d["labels"][rows], offsets=np.concatenate([[0], np.cumsum(lens)]),
                        family=d["family"][ex], voice=d["voice"][ex])


class DeviceCrops:
    """Vectorised random crops on a torch device, with feature-domain augmentation.

    Each crop has ``ctx`` frames of left context from its own example (digital
    silence before the example's start). Augmentation per crop, on frames that
    are not digital silence: a gain (-6..+6 dB), a smooth random spectral tilt /
    microphone colouring (+-6 dB over the bands), and up to two frequency masks
    of up to 8 bands (SpecAugment, Park et al., Interspeech 2019).
    """

    def __init__(self, d: dict, length: int, ctx: int, device: str, seed: int):
        self.dev = torch.device(device)
        self.f = torch.from_numpy(d["features"].astype(np.float32)).to(self.dev)
        self.t = torch.from_numpy(d["targets"].astype(np.float32)).to(self.dev)
        self.lab = torch.from_numpy(d["labels"].astype(np.int64)).to(self.dev)
        off = d["offsets"]
        self.a = torch.from_numpy(off[:-1]).to(self.dev)
        self.b = torch.from_numpy(off[1:]).to(self.dev)
        lens = np.diff(off).astype(np.float64)
        self.p = torch.from_numpy(lens / lens.sum()).to(self.dev)
        self.length, self.ctx = length, ctx
        self.g = torch.Generator(device=self.dev)
        self.g.manual_seed(seed)
        n_mels = self.f.shape[1]
        k = torch.arange(n_mels, device=self.dev, dtype=torch.float32) / (n_mels - 1)
        self.basis = torch.stack([torch.cos(np.pi * j * k) for j in range(1, 4)])  # (3, 64)

    def batch(self, n: int, augment: bool = True):
        L, C = self.length, self.ctx
        ex = torch.multinomial(self.p, n, replacement=True, generator=self.g)
        a, b = self.a[ex], self.b[ex]
        span = (b - a - L).clamp(min=0)
        s = a + (torch.rand(n, device=self.dev, generator=self.g) * (span + 1)).long().clamp(max=span)
        idx = s[:, None] - C + torch.arange(C + L, device=self.dev)[None]
        ok = (idx >= a[:, None]) & (idx < b[:, None])
        idc = idx.clamp(0, len(self.f) - 1)
        x = torch.where(ok[..., None], self.f[idc], torch.full_like(self.f[idc], SILENCE_VALUE))
        tid = idc[:, C:]
        okt = ok[:, C:]
        y = self.t[tid] * okt[..., None]
        lab = self.lab[tid] * okt
        if augment:
            live = x > SILENCE_VALUE + 0.5
            gain = (torch.rand(n, 1, 1, device=self.dev, generator=self.g) - 0.5) * 2 * 1.38
            tilt = ((torch.rand(n, 3, device=self.dev, generator=self.g) - 0.5) * 2 * 0.7) @ self.basis
            x = torch.where(live, x + gain + tilt[:, None, :], x)
            for _ in range(2):
                w = (torch.rand(n, 1, device=self.dev, generator=self.g) * 9).long()
                f0 = (torch.rand(n, 1, device=self.dev, generator=self.g) * (x.shape[2] - 8)).long()
                band = torch.arange(x.shape[2], device=self.dev)[None]
                m = ((band >= f0) & (band < f0 + w))[:, None, :] & live
                x = torch.where(m, x.mean(dim=2, keepdim=True).expand_as(x), x)
        return x, y, lab


class Crops:
    """Random training crops with ``ctx`` frames of left context (digital silence before 0)."""

    def __init__(self, d: dict, length: int, ctx: int, rng: np.random.Generator):
        self.f = d["features"]
        self.t = d["targets"]
        self.lab = d["labels"].astype(np.int64)
        self.off = d["offsets"]
        self.length, self.ctx, self.rng = length, ctx, rng
        lens = np.diff(self.off)
        self.p = lens / lens.sum()

    def batch(self, n: int):
        L, C = self.length, self.ctx
        x = np.full((n, C + L, self.f.shape[1]), SILENCE_VALUE, np.float32)
        y = np.zeros((n, L, self.t.shape[1]), np.float32)
        lab = np.zeros((n, L), np.int64)
        ex = self.rng.choice(len(self.p), n, p=self.p)
        for i, e in enumerate(ex):
            a, b = self.off[e], self.off[e + 1]
            s = a + int(self.rng.integers(0, max(1, b - a - L)))
            end = min(b, s + L)
            lo = max(a, s - C)
            x[i, C - (s - lo): C + end - s] = self.f[lo:end]
            y[i, : end - s] = self.t[s:end]
            lab[i, : end - s] = self.lab[s:end]
        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(lab)


def predict(model: Speech2Face, feats: np.ndarray, chunk: int = 3000):
    """Full-sequence prediction with silence context: (T, 52) weights, (T,) viseme ids."""
    ctx = model.receptive_field - 1
    x = np.concatenate([np.full((ctx, feats.shape[1]), SILENCE_VALUE, np.float32),
                        feats.astype(np.float32)])
    dev = next(model.parameters()).device
    with torch.no_grad():
        y, v = model(torch.from_numpy(x)[None].to(dev), with_visemes=True)
    return y[0, ctx:].cpu().numpy(), v[0, ctx:].argmax(-1).cpu().numpy()


def evaluate(model: Speech2Face, d: dict, max_examples: int = 400) -> dict:
    """Held-out metrics: viseme accuracy (all frames, speech frames), jaw correlation, MAE."""
    model.eval()
    ys, ts, ps, ls = [], [], [], []
    off = d["offsets"]
    for e in range(min(len(off) - 1, max_examples)):
        a, b = off[e], off[e + 1]
        y, v = predict(model, d["features"][a:b])
        ys.append(y), ts.append(d["targets"][a:b].astype(np.float32)), ps.append(v)
        ls.append(d["labels"][a:b].astype(np.int64))
    y, t, p, lab = (np.concatenate(z) for z in (ys, ts, ps, ls))
    speech = lab != 0
    jaw_r = float(np.corrcoef(y[:, JAW], t[:, JAW])[0, 1])
    per_class = {VISEMES[c]: float((p[lab == c] == c).mean()) for c in range(len(VISEMES))
                 if (lab == c).sum() > 50}
    model.train()
    return {"viseme_acc": float((p == lab).mean()), "viseme_acc_speech": float((p[speech] == lab[speech]).mean()),
            "jaw_corr": jaw_r, "mae_driven": float(np.abs(y - t)[:, OUT_INDEX].mean()),
            "jaw_mae": float(np.abs(y[:, JAW] - t[:, JAW]).mean()),
            "silence_jaw_mean": float(y[~speech, JAW].mean()), "per_class_acc": per_class,
            "frames": int(len(lab))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache/avatar_app/speech_data")
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=160)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--channels", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--plain-crops", action="store_true", help="no feature augmentation (first model)")
    ap.add_argument("--train-file", default="train.npz")
    ap.add_argument("--heldout-file", default="heldout.npz")
    ap.add_argument("--eval-every", type=int, default=1500)
    ap.add_argument("--init", type=Path, default=None, help="start from this model.pt")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    train, held = load(a.data / a.train_file), load(a.data / a.heldout_file)
    model = Speech2Face(ch=a.channels)
    sub = train["features"][rng.choice(len(train["features"]), 200000)]
    set_normalisation(model, sub[sub[:, 0] > SILENCE_VALUE + 1])
    if a.init is not None:
        model.load_state_dict(torch.load(a.init, weights_only=True)["state"])
    model.to(a.device)
    log.info("model: %d parameters, receptive field %d frames", n_params(model), model.receptive_field)
    if a.plain_crops:
        crops = Crops(train, a.length, model.receptive_field - 1, rng)
    else:
        crops = DeviceCrops(train, a.length, model.receptive_field - 1, a.device, a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-4)
    budget = a.minutes * 60
    t0 = time.time()
    step = 0
    ctx = model.receptive_field - 1
    w_out = torch.zeros(len(BLENDSHAPE_NAMES), device=a.device)
    w_out[OUT_INDEX] = 1.0
    w_out[JAW] = 3.0  # the most visible shape
    while True:
        el = time.time() - t0
        if el > budget:
            break
        frac = el / budget
        lr = a.lr * min(1.0, (step + 1) / 200) * 0.5 * (1 + np.cos(np.pi * frac))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, lab = crops.batch(a.batch)
        pred, vis = model(x, with_visemes=True)
        pred, vis = pred[:, ctx:], vis[:, ctx:]
        err = pred - y
        loss = ((err.abs() + 2 * err**2) * w_out).sum(-1).mean() / w_out.sum() * 10
        dl = ((pred[:, 1:] - pred[:, :-1]) - (y[:, 1:] - y[:, :-1])) ** 2
        loss = loss + (dl * w_out).sum(-1).mean() / w_out.sum() * 20
        loss = loss + 0.3 * F.cross_entropy(vis.reshape(-1, vis.shape[-1]), lab.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 200 == 0:
            log.info("step %d  %.0f s  lr %.2e  loss %.4f", step, el, lr, float(loss.detach()))
        if a.out_dir is not None and step % 2000 == 0:
            a.out_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                        "channels": a.channels}, a.out_dir / "model.pt")
        if step % a.eval_every == 0:
            log.info("held-out: %s", json.dumps(evaluate(model, held, 60)))
    metrics = {"steps": step, "train_minutes": (time.time() - t0) / 60, "params": n_params(model),
               "receptive_field": model.receptive_field, "heldout_flite": evaluate(model, held)}
    log.info("final: %s", json.dumps(metrics))
    out = a.out_dir or a.data
    out.mkdir(parents=True, exist_ok=True)
    model.cpu()
    torch.save({"state": model.state_dict(), "channels": a.channels}, out / "model.pt")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
