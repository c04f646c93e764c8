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
    """Load a split written by make_data.py."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


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
    with torch.no_grad():
        y, v = model(torch.from_numpy(x)[None], with_visemes=True)
    return y[0, ctx:].numpy(), v[0, ctx:].argmax(-1).numpy()


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
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    train, held = load(a.data / "train.npz"), load(a.data / "heldout.npz")
    model = Speech2Face(ch=a.channels)
    sub = train["features"][rng.choice(len(train["features"]), 200000)]
    set_normalisation(model, sub[sub[:, 0] > SILENCE_VALUE + 1])
    log.info("model: %d parameters, receptive field %d frames", n_params(model), model.receptive_field)
    crops = Crops(train, a.length, model.receptive_field - 1, rng)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-4)
    budget = a.minutes * 60
    t0 = time.time()
    step = 0
    ctx = model.receptive_field - 1
    w_out = torch.zeros(len(BLENDSHAPE_NAMES))
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
            log.info("step %d  %.0f s  lr %.2e  loss %.4f", step, el, lr, float(loss))
        if step % 1500 == 0:
            log.info("held-out: %s", json.dumps(evaluate(model, held, 60)))
    metrics = {"steps": step, "train_minutes": (time.time() - t0) / 60, "params": n_params(model),
               "receptive_field": model.receptive_field, "heldout_flite": evaluate(model, held)}
    log.info("final: %s", json.dumps(metrics))
    torch.save({"state": model.state_dict(), "channels": a.channels}, a.data / "model.pt")
    (a.data / "metrics.json").write_text(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
