"""Train, evaluate and export the face_recon engine (2-core CPU: about 13 minutes).

Usage (repository root)::

    python -m training.face_recon.train --data ~/.cache/avatar_app/face_recon \
        --out models/face_recon.onnx [--epochs 40] [--synthetic 120000] [--rt-repeat 3] [--bce 0.1]

Data: a synthetic projected set made on the fly (``--synthetic`` samples,
seed 11, ``--small-share`` of them scaled down to small expressions) plus the render-and-track
sets (``--rt-train``: ``rt_train_discs.npz`` and ``rt_train.npz`` from make_data.py),
repeated ``--rt-repeat`` times per epoch. Held out: synthetic seed 12
(5000 samples) and ``rt_heldout.npz`` (other seed, other subjects).

Loss: L2 + 0.1 x L1 + ``--bce`` x binary cross-entropy (soft targets) on the
51 estimated blendshapes (plain L1 learns slowly on sparse targets: it favours
the all-zero answer). The cross-entropy term is what keeps rare shapes alive:
through a sigmoid, the L2 gradient is 2 (p - y) p (1 - p), which vanishes once
a shape's logit is driven far negative by its many zero targets, and without
it 23 of the 51 shapes (mouthFunnel, mouthPucker, mouthFrown, jawLeft, ...)
stayed at exactly 0 for every input; the cross-entropy's gradient on the logit
is p - y, which does not (sweep 8 of results/ablation.json). + 0.5 x the rotation-matrix
L2 of the pose refinement (radian scale) + 0.2 x L1 translation refinement
(centimetres; the distance is only known up to the unobserved focal length,
so this term is small) + 0.1 x L1 identity coefficients.

Writes the ONNX (opset 17, dynamic batch), ``<stem>.card.json`` (engine
metadata and all figures), ``<stem>.val.npz`` and ``<stem>.calib.npz``
(256 held-out samples each, half synthetic half render-and-track; the
calibration set from other samples than the validation set) and
``<stem>.metrics.json`` (training curve and the held-out tables).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

from avatar_app.avatar.face_model import load_face_model
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.core.rotations import rotation_angle_deg
from avatar_app.reconstruction import normalise as N
from training.face_recon import data as D
from training.face_recon import sampling as S
from training.face_recon.make_data import synthetic_set
from training.face_recon.model import FaceReconNet, rotation_from_6d_torch

log = logging.getLogger("face_recon.train")

SYN_TRAIN_SEED, SYN_HELDOUT_SEED = 11, 12


def _batches(n: int, bs: int, rng: np.random.Generator):
    idx = rng.permutation(n)
    for i in range(0, n - bs + 1, bs):
        yield idx[i:i + bs]


def predict(model: FaceReconNet, prep: dict, bs: int = 2048) -> dict[str, np.ndarray]:
    """Run the torch model over a prepared set: blendshapes, rotation (composed), translation, identity."""
    model.eval()
    outs = {"bs": [], "rot6d": [], "t": [], "ident": []}
    with torch.no_grad():
        for i in range(0, len(prep["x"]), bs):
            x = torch.from_numpy(np.asarray(prep["x"][i:i + bs], np.float32))
            n = torch.from_numpy(np.asarray(prep["n"][i:i + bs], np.float32))
            b, r, t, k = model.forward_subset(x, n)
            for key, v in zip(outs, (b, r, t, k)):
                outs[key].append(v.numpy())
    out = {k: np.concatenate(v) for k, v in outs.items()}
    out["rotation"], out["translation"] = N.compose_pose(prep["r0"], prep["t0"], out["rot6d"], out["t"])
    return out


def evaluate(model: FaceReconNet, prep: dict, const: np.ndarray) -> dict:
    """Held-out figures: blendshape MAE vs the constant predictor, rotation, translation, identity."""
    out = predict(model, prep)
    m = D.metrics(out["bs"], prep["weights"], const)
    rot_err = rotation_angle_deg(out["rotation"], prep["rotation"])
    rot0_err = rotation_angle_deg(prep["r0"], prep["rotation"])
    m.update({
        "rotation_err_deg_median": float(np.median(rot_err)),
        "rotation_err_deg_p90": float(np.percentile(rot_err, 90)),
        "alignment_only_rotation_err_deg_median": float(np.median(rot0_err)),
        "translation_err_m_median": float(np.median(np.linalg.norm(out["translation"] - prep["translation"], axis=1))),
        "identity_mae": float(np.abs(out["ident"] - prep["identity"]).mean()),
        "samples": int(len(prep["x"])),
    })
    return m


KEYS = ("x", "n", "weights", "rot_res", "t_res", "identity")


def build_training_set(synthetic: dict | None, rt: dict | None, rt_repeat: int) -> dict[str, np.ndarray]:
    """Concatenate prepared synthetic samples and ``rt_repeat`` copies of the render-and-track ones."""
    parts = ([synthetic] if synthetic is not None else []) + ([rt] * rt_repeat if rt is not None else [])
    out = {k: np.concatenate([p[k] for p in parts]).astype(np.float32) for k in KEYS}
    # 1 for render-and-track samples (fit's ``bce_rt`` scales their cross-entropy)
    out["is_rt"] = np.concatenate([np.full(len(p["x"]), float(p is rt), np.float32) for p in parts])
    return out


def fit(train_set: dict, evals: dict, const: np.ndarray, epochs: int, batch: int = 512, lr: float = 2e-3,
        hidden=(512, 256), use_z: bool = True, device: str = "cpu", seed: int = 0,
        log_every: int = 1, weight_decay: float = 1e-4, bce: float = 0.1, bce_rt: float = 0.0,
        **net_options) -> tuple[FaceReconNet, list[dict]]:
    """Train one network.

    Args:
        train_set: prepared arrays (:data:`KEYS`).
        evals: name -> prepared held-out set, evaluated after each ``log_every`` epochs.
        const: (52,) constant predictor (training mean) for the figures.
        epochs, batch, lr: AdamW with a one-cycle schedule.
        hidden, use_z, net_options: architecture (see FaceReconNet).
        weight_decay: AdamW's decoupled weight decay.
        bce: weight of the binary cross-entropy (soft targets) added to the blendshape loss;
            0 gives the plain L2 + 0.1 L1 loss (see the module docstring for why).
        bce_rt: share of that weight applied to render-and-track samples (1: all samples alike,
            0: synthetic samples only; needs ``train_set["is_rt"]`` when not 1).
        device: torch device.
        seed: torch and shuffling seed.

    Returns:
        (the model on the CPU in eval mode, the training curve).
    """
    torch.manual_seed(seed)
    rig = load_face_model()
    model = FaceReconNet(rig.mirror, rig.num_identity, hidden=hidden, use_z=use_z, **net_options)
    model.set_input_stats(train_set["x"], train_set["n"])
    model.to(device)
    n_train = len(train_set["x"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * (n_train // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    est = torch.from_numpy(D.ESTIMATED).to(device)
    tensors = {k: torch.from_numpy(v).to(device) for k, v in train_set.items()}
    rng = np.random.default_rng(seed)
    curve = []
    t0 = time.time()
    for epoch in range(epochs):
        model.train()
        tot, nb = torch.zeros((), device=device), 0
        for idx in _batches(n_train, batch, rng):
            it = torch.from_numpy(idx).to(device)
            bs, rot6, t, ident, (log_p, log_q) = model.forward_subset(
                tensors["x"][it], tensors["n"][it], with_log_probs=True)
            y = tensors["weights"][it]
            d_bs = (bs - y).index_select(1, est)
            l_bs = (d_bs ** 2).mean() + 0.1 * d_bs.abs().mean()
            if bce > 0:
                ce = -(y * log_p + (1 - y) * log_q).index_select(1, est).mean(1)
                if bce_rt != 1.0:
                    ce = ce * (1.0 - (1.0 - bce_rt) * tensors["is_rt"][it])
                l_bs = l_bs + bce * ce.mean()
            l_rot = ((rotation_from_6d_torch(rot6) - tensors["rot_res"][it]) ** 2).sum((1, 2)).mean()
            l_t = ((t - tensors["t_res"][it]).abs() * 100.0).clamp_max(10.0).mean()
            l_id = (ident - tensors["identity"][it]).abs().mean()
            loss = l_bs + 0.5 * l_rot + 0.002 * l_t + 0.1 * l_id
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.detach()
            nb += 1
        if (epoch + 1) % log_every == 0 or epoch + 1 == epochs:
            row = {"epoch": epoch + 1, "loss": float(tot) / nb, "elapsed_s": time.time() - t0}
            model.cpu()
            for name, prep in evals.items():
                ev = evaluate(model, prep, const)
                row[f"{name}_mae"] = ev["mae"]
                row[f"{name}_rot_deg"] = ev["rotation_err_deg_median"]
            model.to(device)
            curve.append(row)
            log.info("epoch %d: %s", epoch + 1, {k: round(v, 4) for k, v in row.items()})
    model.cpu().eval()
    return model, curve


def train(args) -> dict:
    """Make the data, fit, and evaluate on the held-out sets (see the module docstring)."""
    torch.set_num_threads(args.threads)
    t_start = time.time()
    data_dir = Path(args.data).expanduser()
    needed = ["rt_heldout.npz"] + (list(args.rt_train) if args.rt_repeat > 0 else [])
    missing = [n for n in needed if not (data_dir / n).is_file()]
    if missing:
        raise SystemExit(
            f"render-and-track data missing in {data_dir}: {', '.join(missing)}; make them with "
            "python -m training.face_recon.make_data render-track ... (commands in "
            "training/face_recon/README.md)" + ("" if args.rt_repeat == 0 else
                                                 "; --rt-repeat 0 trains without the training sets"))
    rig = load_face_model()
    log.info("making %d synthetic samples", args.synthetic)
    syn = D.prepare(synthetic_set(SYN_TRAIN_SEED, args.synthetic, rig, small_share=args.small_share))
    syn_ho_raw = synthetic_set(SYN_HELDOUT_SEED, 5000, rig)
    syn_ho = D.prepare(syn_ho_raw)
    rt = (D.prepare(D.merge_raw([D.load_raw(data_dir / name) for name in args.rt_train]))
          if args.rt_repeat > 0 else None)
    rt_ho_raw = D.load_raw(data_dir / "rt_heldout.npz")
    rt_ho = D.prepare(rt_ho_raw)
    train_set = build_training_set(syn, rt, args.rt_repeat)
    if len(train_set["x"]) < args.batch:
        raise SystemExit(f"{len(train_set['x'])} training samples are fewer than one batch of "
                         f"{args.batch}: raise --synthetic or --rt-repeat, or lower --batch")
    const = train_set["weights"].mean(0)
    log.info("data ready in %.0f s: %d training samples (%d render-and-track x %d)", time.time() - t_start,
             len(train_set["x"]), 0 if rt is None else len(rt["x"]), args.rt_repeat)
    model, curve = fit(train_set, {"syn": syn_ho, "rt": rt_ho}, const, args.epochs, args.batch, args.lr,
                       tuple(args.hidden), not args.no_z, seed=args.seed, log_every=args.log_every,
                       weight_decay=args.weight_decay, dropout=args.dropout, noise=args.noise,
                       trunk_reads_neutral=args.trunk_reads_neutral, bce=args.bce, bce_rt=args.bce_rt)
    result = {
        "train_seconds": time.time() - t_start, "threads": args.threads, "seed": args.seed, "epochs": args.epochs,
        "hidden": list(args.hidden), "use_z": not args.no_z, "dropout": args.dropout,
        "weight_decay": args.weight_decay, "noise": args.noise, "bce": args.bce, "bce_rt": args.bce_rt,
        "trunk_reads_neutral": args.trunk_reads_neutral, "small_share": args.small_share,
        "training_samples": len(train_set["x"]), "synthetic_samples": args.synthetic,
        "render_track_samples": 0 if rt is None else int(len(rt["x"])), "rt_repeat": args.rt_repeat,
        "render_track_sets": list(args.rt_train),
        "constant_predictor": {BLENDSHAPE_NAMES[i]: float(const[i]) for i in range(len(const))},
        "heldout_synthetic": evaluate(model, syn_ho, const),
        "heldout_render_track": evaluate(model, rt_ho, const), "curve": curve,
    }
    result["_model"] = model
    result["_sets"] = (syn_ho_raw, rt_ho_raw)
    return result


def export(model: FaceReconNet, out: Path, card_extra: dict) -> None:
    """Write the ONNX model with its engine metadata (opset 17, batch 1..16)."""
    import onnx

    model.freeze_for_export()
    dummy = (torch.zeros(1, 478, 3), torch.zeros(1, 478, 3))
    out.parent.mkdir(parents=True, exist_ok=True)
    dyn = {"landmarks": {0: "B"}, "neutral": {0: "B"}, "blendshapes": {0: "B"},
           "rotation_6d": {0: "B"}, "translation": {0: "B"}, "identity": {0: "B"}}
    torch.onnx.export(model, dummy, str(out), input_names=["landmarks", "neutral"],
                      output_names=["blendshapes", "rotation_6d", "translation", "identity"],
                      dynamic_axes=dyn, opset_version=17, dynamo=False)
    m = onnx.load(str(out))
    meta = {"avatar_app.dynamic_dims": json.dumps({"B": [1, 1, 16]}),
            "avatar_app.normalisation_version": str(N.NORMALISATION_VERSION),
            "avatar_app.model": "face_recon", "avatar_app.licence": "GPL-3.0-or-later"}
    meta.update({k: json.dumps(v) if not isinstance(v, str) else v for k, v in card_extra.items()})
    for k, v in meta.items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(m)
    onnx.save(m, str(out))


def write_sets(out: Path, syn_raw: dict, rt_raw: dict, n: int = 1024, seed: int = 5) -> None:
    """``<stem>.val.npz`` and ``<stem>.calib.npz``: disjoint held-out samples, half of each kind.

    Stored as float16 (the engine layer casts to the inputs' float32; 0.02 mm
    rounding) with the points outside the 146-landmark subset zeroed (the
    network never reads them), so ~1000 samples fit in a few MB.
    """
    rng = np.random.default_rng(seed)
    si = rng.permutation(len(syn_raw["subject"]))[: n]
    ri = rng.permutation(len(rt_raw["subject"]))[: n]
    keep = np.zeros(478, bool)
    keep[list(N.SUBSET)] = True
    for name, a, b in (("val", si[: n // 2], ri[: n // 2]), ("calib", si[n // 2:], ri[n // 2:])):
        f1, f2 = D.full_inputs(syn_raw, a), D.full_inputs(rt_raw, b)
        feeds = {}
        for k in f1:
            arr = np.concatenate([f1[k], f2[k]]).astype(np.float16)
            arr[:, ~keep] = 0
            feeds[k] = arr
        np.savez_compressed(out.with_name(f"{out.stem}.{name}.npz"), **feeds)


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", default="~/.cache/avatar_app/face_recon",
                    help="folder with the render-and-track sets of make_data.py")
    ap.add_argument("--out", type=Path, default=Path("models/face_recon.onnx"),
                    help="the ONNX to write; its card, val/calib sets and metrics go beside it")
    ap.add_argument("--epochs", type=int, default=40, help="passes over the training set")
    ap.add_argument("--dropout", type=float, default=0.2, help="dropout after each hidden layer")
    ap.add_argument("--weight-decay", type=float, default=1e-3, help="AdamW's decoupled weight decay")
    ap.add_argument("--noise", type=float, default=0.05,
                    help="training noise on the standardised inputs, in sd (robustness to tracker jitter)")
    ap.add_argument("--bce", type=float, default=0.1,
                    help="weight of the cross-entropy term of the blendshape loss (0: L2 + 0.1 L1 only, "
                         "which lets rare shapes' sigmoids saturate at 0 for good)")
    ap.add_argument("--bce-rt", type=float, default=0.0,
                    help="share of the cross-entropy weight applied to render-and-track samples "
                         "(1: as synthetic ones; 0: synthetic samples only; sweep 8)")
    ap.add_argument("--synthetic", type=int, default=120000, help="synthetic training samples made on the fly")
    ap.add_argument("--rt-repeat", type=int, default=3,
                    help="copies of the render-and-track training frames per epoch (0: synthetic only)")
    ap.add_argument("--rt-train", nargs="+", default=["rt_train_discs.npz", "rt_train.npz"],
                    help="render-and-track training sets in --data (merged; README: how each is made)")
    ap.add_argument("--batch", type=int, default=512, help="samples per optimiser step")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of the one-cycle schedule")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch CPU threads")
    ap.add_argument("--seed", type=int, default=0, help="torch and shuffling seed (the data are fixed)")
    ap.add_argument("--hidden", type=int, nargs="+", default=[768, 384], help="trunk layer widths")
    ap.add_argument("--small-share", type=float, default=S.SMALL_SHARE,
                    help="share of training faces scaled down to small expressions (sampling.py)")
    ap.add_argument("--trunk-reads-neutral", action="store_true",
                    help="the trunk reads the whole neutral shape (ablation; default: only the identity "
                         "coefficients, which generalises to real faces outside the rig's identity space)")
    ap.add_argument("--no-z", action="store_true", help="ignore MediaPipe's depth channel (ablation)")
    ap.add_argument("--log-every", type=int, default=2, help="evaluate every N epochs")
    ap.add_argument("--no-export", action="store_true",
                    help="write only the metrics JSON (no ONNX, card or data sets)")
    args = ap.parse_args(argv)
    if args.epochs < 1 or args.rt_repeat < 0 or args.batch < 1 or args.synthetic < 0:
        ap.error("--epochs and --batch must be at least 1, --rt-repeat and --synthetic at least 0")
    if args.synthetic == 0 and args.rt_repeat == 0:
        ap.error("no training data: --synthetic and --rt-repeat are both 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    res = train(args)
    model = res.pop("_model")
    syn_raw, rt_raw = res.pop("_sets")
    out = args.out
    metrics_path = out.with_name(out.stem + ".metrics.json")
    if not args.no_export:
        out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), out.with_name(out.stem + ".pt"))
        export(model, out, {})
        write_sets(out, syn_raw, rt_raw)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(res, indent=1))
    for k in ("heldout_synthetic", "heldout_render_track"):
        r = res[k]
        log.info("%s: MAE %.4f (constant %.4f, ratio %.2f), rotation %.2f deg median (alignment only %.2f)",
                 k, r["mae"], r["const_mae"], r["ratio"], r["rotation_err_deg_median"],
                 r["alignment_only_rotation_err_deg_median"])
    log.info("total %.0f s", res["train_seconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
