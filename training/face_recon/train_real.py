"""Train face_recon on synthetic faces plus real-face self-supervision (analysis by synthesis).

Usage (repository root; PyTorch and numpy only, so it runs on the GPU machine too)::

    python -m training.face_recon.real_data --out tmp/face_recon_real.npz      # needs MediaPipe
    python -m training.face_recon.train_real --real tmp/face_recon_real.npz --out tmp/face_recon_real.pt
    python -m training.face_recon.train_real --export tmp/face_recon_real.pt --real tmp/face_recon_real.npz \
        --out models/face_recon.onnx                                            # ONNX + val/calib sets

Each optimiser step sees three batches:

1. **Synthetic** (``--synthetic`` projected samples of the face model, seed 11, as train.py
   makes them): the supervised loss of :func:`training.face_recon.train.fit` (blendshapes L2 +
   0.1 L1 + cross-entropy, pose refinement, identity). A share ``--still-share`` of them is
   given as a still is given at run time without calibration (the automatic neutral of one
   frame is the frame itself): ``landmarks`` = 0, ``neutral`` = the whole expressive face -
   template, same targets. This is the synthetic supervision for what geometry alone cannot
   separate: the expression from the face's own shape in a single photo.
2. **Real frames** (every real recording of the test data, the runtime's own inputs: see
   real_data.py), self-supervised by analysis by synthesis: the engine's blendshapes ``w``
   and pose refinement ``R`` are put through the face model (same topology as MediaPipe's
   mesh) and must reproduce the frame's aligned MediaPipe landmarks (the alignment is the
   camera's inverse: pinhole un-projection and a rigid fit, normalise.align). Per frame,
   on the 146 landmarks the network reads, ``x_hat = R (nh + B w) - nh`` with ``nh`` the
   neutral in use and ``B`` the face model's blendshape offsets; the loss is the mean squared
   distance of ``x`` and ``x_hat`` after removing their mean (the translation), in cm^2
   (``--w-lmk``). Priors: sparsity (``--w-sparse`` x mean w), left/right symmetry
   (``--w-sym`` x mean squared difference of mirrored shapes), temporal smoothness
   (``--w-temporal`` x mean squared change to the next frame of the same clip).
   Distillation (``--w-distill``): L2 + 0.1 L1 to the geometric solver's output on the same
   frame.
3. **Stills** (photos, incl. the odd London ids): weak labels for what the solver cannot
   read: on a smiling London photo the mean mouthSmile must reach ``--smile-target``
   (squared hinge), on a neutral one every shape must stay under ``--neutral-max`` and the
   smile under half of it.
4. **Re-tracked stills and pose targets** (``--aug``, real_aug.py's file; optional): the
   output on a still re-tracked after a JPEG re-encode with a sub-pixel shift, an in-plane
   rotation or a rescale, read against a neutral (the still itself, or a pair's neutral photo),
   must equal the output on the original read against the same neutral (``--w-cons`` x mean
   squared difference, the target without gradient, in eval mode: MediaPipe's changes under
   these perturbations are not expression); and on the real video frames the depth scale of
   the translation output (:func:`avatar_app.reconstruction.engine.depth_scale`, unclipped)
   must equal the geometric solver's, ``t_solver . t0 / |t0|^2`` (``--w-depth`` x squared
   difference), so the runtime places the head at the solver's distance. The engine tests'
   stills (real_aug.TEST_STILLS, ``--cons-holdout``) are left out of the consistency loss, so the
   stability, rotation and flip tests measure photos it never saw perturbed.
5. **Feature distillation** (``--w-feat``, ``--feat``): the fidelity features of
   :func:`avatar_app.evaluation.geometry.shape_features` (eye apertures, eye asymmetry, mouth
   corners, lip gap, mouth width; a name given twice weighs twice) of the face model under the
   output must equal those under the solver's output, each over the solver's sd on the video
   frames (squared difference).
6. **Residual consistency** (``--w-bank``, with ``--aug``): MediaPipe's re-tracking residuals of
   the consistency stills (copy - original) added to the synthetic batch's inputs (a still's
   neutral, a frame's displacement); the output must stay as on the clean input (eval mode,
   target without gradient), so invariance learnt on a few photos is asked of every face.
   ``--bank-real`` asks it of the real batch too (video frames and photos); ``--bank-scale``
   scales the residuals (``--bank-scale-random``: per sample uniform in [0, scale]).

7. **Ensemble distillation** (``--teacher``, ``--w-teach``): the mean blendshapes of several trained
   state dicts (training/face_recon/ensemble.py) on the synthetic batch, the real batch and the
   re-tracked copies are the target of a squared-difference term (Hinton et al. 2015), so one network
   of the shipped size learns what the average of independently seeded candidates does.

``--init`` starts from a state dict (its input statistics kept): fine-tuning a candidate.
``--checkpoint`` writes ``--out`` at every logged epoch (a run stopped at a time limit keeps it).

Written: a state dict (.pt) and a metrics JSON beside it (curve, synthetic held-out figures,
label-free figures on the real clips: avatar_app/evaluation's pooled r of the face model's
geometry driven by the output against the frame's geometry).
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
from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, mirror_index
from avatar_app.reconstruction import normalise as N
from training.face_recon import data as D
from training.face_recon import sampling as S
from training.face_recon.make_data import synthetic_set
from training.face_recon.model import FaceReconNet, rotation_from_6d_torch
from training.face_recon.real_aug import TEST_STILLS
from training.face_recon.train import SYN_HELDOUT_SEED, SYN_TRAIN_SEED, build_training_set, evaluate

log = logging.getLogger("face_recon.train_real")

SMILE = [BLENDSHAPE_NAMES.index("mouthSmileLeft"), BLENDSHAPE_NAMES.index("mouthSmileRight")]


def load_real(path: Path) -> dict[str, np.ndarray]:
    """The real-face set of real_data.py as a dict of arrays."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def real_label_free(model: FaceReconNet, real: dict, device: str = "cpu") -> dict:
    """Pooled and per-clip r of the face model's geometry under the output vs the frame's (video clips).

    The figures of benchmarks/fidelity.py's comparison (a), computed on the training frames
    with per-frame identity (the runtime averages it): a training monitor, not the benchmark.
    """
    from avatar_app.evaluation import fidelity as F
    from avatar_app.evaluation import geometry as G

    rig = load_face_model()
    w, _, ident = _predict(model, real["x"], real["n"], device)
    vid = ~real["still"]
    out_pts = rig.evaluate(w[vid], ident[vid])
    f_out = G.shape_features(out_pts)
    f_in = G.shape_features(real["head"][vid])
    clips = real["clip"][vid]
    pad = np.zeros((len(f_in), len(G.POSE_FEATURES)))
    series, per = [], {}
    for c in np.unique(clips):
        m = clips == c
        a, b = np.concatenate([f_in[m], pad[m]], 1), np.concatenate([f_out[m], pad[m]], 1)
        series.append((a, b))
        sc = F.score_clip(a, b, np.ones(int(m.sum()), bool))
        per[str(real["clip_names"][c])] = sc.mean_r
    pooled = F.pooled(series)
    groups = ("eye_aperture", "lip_gap", "corner_height", "mouth_width", "brow_height", "eye_asymmetry")
    return {"pooled_r": {g: pooled[g]["r"] for g in groups if g in pooled}, "clip_mean_r": per}


def _predict(model, x, n, device, bs: int = 4096):
    model.eval()
    ws, rs, ks = [], [], []
    with torch.no_grad():
        for i in range(0, len(x), bs):
            b, r, _, k = model.forward_subset(torch.from_numpy(x[i:i + bs]).to(device),
                                              torch.from_numpy(n[i:i + bs]).to(device))
            ws.append(b.cpu().numpy())
            rs.append(r.cpu().numpy())
            ks.append(k.cpu().numpy())
    return np.concatenate(ws), np.concatenate(rs), np.concatenate(ks)


def london_train(model: FaceReconNet, real: dict, device: str = "cpu") -> dict:
    """Share of the labelled (odd-id) London photos read right by the London criteria (per photo)."""
    w, _, _ = _predict(model, real["x"], real["n"], device)
    lab = real["smile_label"]
    smile = w[:, SMILE].mean(1)
    sm, ne = lab == 1, lab == 0
    return {"smiling_ok": float(np.mean(smile[sm] >= 0.3)) if sm.any() else None,
            "neutral_ok": float(np.mean((w[ne].max(1) <= 0.25) & (smile[ne] <= 0.15))) if ne.any() else None,
            "mean_smile_smiling": float(smile[sm].mean()) if sm.any() else None,
            "mean_smile_neutral": float(smile[ne].mean()) if ne.any() else None}


def landmark_residual(w: torch.Tensor, rot: torch.Tensor, x: torch.Tensor, nh: torch.Tensor,
                      offsets: torch.Tensor) -> torch.Tensor:
    """The analysis-by-synthesis residual of the dense landmark loss, centimetres.

    Args:
        w: (B, 52) blendshape weights; rot: (B, 3, 3) the pose refinement (aligned frame).
        x: (B, P, 3) observed displacement from the neutral, metres (the network's ``landmarks``).
        nh: (B, P, 3) the neutral in use, head frame, metres (``neutral`` + template).
        offsets: (52, P, 3) the face model's blendshape offsets on the same P points, metres.

    Returns:
        (B, P, 3) ``x - (rot (nh + offsets w) - nh)`` in cm, its mean over the points removed
        (the translation is not compared).
    """
    x_hat = torch.einsum("bij,bpj->bpi", rot, nh + torch.einsum("bk,kpc->bpc", w, offsets)) - nh
    res = (x - x_hat) * 100.0
    return res - res.mean(1, keepdim=True)


#: The fidelity features of :func:`avatar_app.evaluation.geometry.shape_features` that
#: ``--w-feat`` distils by default (the brows are left to the other losses: the network
#: already reads them better than the solver).
FEAT_DEFAULT = ("eye_aperture_l", "eye_aperture_r", "eye_asymmetry", "corner_height_l", "corner_height_r",
                "lip_gap", "mouth_width")


def shape_features_torch(p: torch.Tensor) -> torch.Tensor:
    """:func:`avatar_app.evaluation.geometry.shape_features` in PyTorch (differentiable).

    Args:
        p: (B, 478, 3) float head-frame points (any unit).

    Returns:
        (B, 9) float, columns in :data:`avatar_app.evaluation.geometry.SHAPE_FEATURES` order.
    """
    from avatar_app.core import landmarks as lmk
    from avatar_app.evaluation import geometry as G

    centre = {s: 0.5 * (p[:, a] + p[:, b]) for s, (a, b, *_) in G._EYES.items()}
    span = (centre["l"] - centre["r"]).norm(dim=-1).clamp_min(1e-9)
    out = {}
    for s, (outer, inner, up, lo, brow) in G._EYES.items():
        width = (p[:, outer] - p[:, inner]).norm(dim=-1).clamp_min(1e-9)
        gap = (p[:, list(up)] - p[:, list(lo)]).norm(dim=-1).mean(-1)
        out[f"eye_aperture_{s}"] = gap / width
        out[f"brow_height_{s}"] = (p[:, list(brow), 1].mean(-1) - p[:, G._BRIDGE, 1]) / span
    out["lip_gap"] = (p[:, list(lmk.LIP_GAP_UPPER)] - p[:, list(lmk.LIP_GAP_LOWER)]).norm(dim=-1).mean(-1) / span
    cr, cl = p[:, int(lmk.FacePoint.MOUTH_RIGHT)], p[:, int(lmk.FacePoint.MOUTH_LEFT)]
    out["mouth_width"] = (cl - cr).norm(dim=-1) / span
    mid_y = 0.5 * (p[:, int(lmk.FacePoint.LIP_UPPER_INNER), 1] + p[:, int(lmk.FacePoint.LIP_LOWER_INNER), 1])
    out["corner_height_l"] = (cl[:, 1] - mid_y) / span
    out["corner_height_r"] = (cr[:, 1] - mid_y) / span
    out["eye_asymmetry"] = out["eye_aperture_r"] - out["eye_aperture_l"]
    return torch.stack([out[k] for k in G.SHAPE_FEATURES], -1)


def fit_real(syn: dict, real: dict, evals: dict, args, device: str,
             aug: dict | None = None) -> tuple[FaceReconNet, list[dict]]:
    """Train one network on the synthetic set and the real set (module docstring).

    ``aug``: real_aug.py's arrays (the consistency and depth losses; None: neither).
    """
    torch.manual_seed(args.seed)
    rig = load_face_model()
    rng = np.random.default_rng(args.seed)
    model = FaceReconNet(rig.mirror, rig.num_identity, hidden=tuple(args.hidden), noise=args.noise,
                         dropout=args.dropout, trunk_reads_neutral=args.trunk_reads_neutral)
    n_stat = min(len(syn["x"]), 40000)
    k_still = int(args.still_share * n_stat)
    sx = np.concatenate([syn["x"][:n_stat - k_still], np.zeros_like(syn["x"][:k_still]), real["x"]])
    sn = np.concatenate([syn["n"][:n_stat - k_still], syn["x"][:k_still] + syn["n"][:k_still], real["n"]])
    if args.init is not None:  # fine-tune: the input statistics come with the state dict
        model.load_state_dict(torch.load(args.init, map_location="cpu"), strict=False)
    else:
        model.set_input_stats(sx, sn)
    model.to(device)
    sub = np.asarray(N.SUBSET)
    b_full = torch.from_numpy(np.asarray(rig.blendshapes, np.float32)).to(device)  # (52, 478, 3)
    pw = torch.ones(478, device=device)
    pw[torch.from_numpy(feature_points())] = args.feature_weight
    pw = pw / pw.mean()
    b_sub = torch.from_numpy(np.asarray(rig.blendshapes)[:, sub].astype(np.float32)).to(device)  # (52, 146, 3)
    tmpl = torch.from_numpy(N.template()[sub].astype(np.float32)).to(device)
    est = torch.from_numpy(D.ESTIMATED).to(device)
    mir = torch.from_numpy(np.asarray(mirror_index(), np.int64)).to(device)
    T = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in syn.items()
         if k in ("x", "n", "weights", "rot_res", "t_res", "identity")}
    R = {k: torch.from_numpy(np.ascontiguousarray(real[k])).to(device)
         for k in ("x", "n", "solver", "next", "smile_label")}
    vid_idx = np.flatnonzero(~real["still"] & (real["next"] >= 0))
    still_idx = torch.from_numpy(np.flatnonzero(real["still"])).to(device)
    lab = R["smile_label"][still_idx]
    cons = consistency_pairs(real, aug, holdout=tuple(args.cons_holdout)) if aug is not None else None
    if cons is not None:
        log.info("consistency: %d inputs (held out: %s)", len(cons["x"]), ", ".join(args.cons_holdout))
    teachers = [load_state(p_, rig, args.hidden).to(device).eval() for p_ in (args.teacher or [])]

    def teach(xt_: torch.Tensor, nt_: torch.Tensor) -> torch.Tensor:
        """The teachers' mean blendshapes on subset inputs (no gradient)."""
        with torch.no_grad():
            return sum(m.forward_subset(xt_, nt_)[0] for m in teachers) / len(teachers)
    # the fidelity features of the face model under the output vs under the solver's output
    from avatar_app.evaluation import geometry as G
    neutral_pts = torch.from_numpy(np.asarray(rig.neutral, np.float32)).to(device)
    feat_cols = torch.tensor([G.SHAPE_FEATURES.index(f) for f in args.feat], device=device)
    with torch.no_grad():
        f_sol_all = shape_features_torch(neutral_pts + torch.einsum(
            "bk,kpc->bpc", R["solver"][torch.from_numpy(np.flatnonzero(~real["still"])).to(device)], b_full))
        feat_scale = f_sol_all.std(0).clamp_min(1e-4)  # per feature: the solver's spread on the video frames
    if cons is not None:
        C = {k: torch.from_numpy(v).to(device) for k, v in cons.items()}
        bank = C["x"] - C["xt"]  # (M', 146, 3) re-tracking residuals of the training stills
    if aug is not None:
        t_al = torch.from_numpy(aug["t0"]).to(device)
        d0 = (t_al ** 2).sum(1).clamp_min(1e-6)
        s_tgt = (torch.from_numpy(aug["t_solver"]).to(device) * t_al).sum(1) / d0  # the solver's depth scale
    n_train = len(syn["x"])
    steps_per_epoch = n_train // args.batch
    steps = args.epochs * steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
    curve, t0 = [], time.time()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.from_numpy(rng.permutation(n_train)).to(device)
        sums = {}
        for s in range(steps_per_epoch):
            it = perm[s * args.batch:(s + 1) * args.batch]
            x, n = T["x"][it], T["n"][it]
            still = torch.rand(len(it), device=device) < args.still_share
            n = torch.where(still[:, None, None], x + n, n)
            x = torch.where(still[:, None, None], torch.zeros_like(x), x)
            bs, rot6, t, ident, (log_p, log_q) = model.forward_subset(x, n, with_log_probs=True)
            y = T["weights"][it]
            d = (bs - y).index_select(1, est)
            l_syn = (d ** 2).mean() + 0.1 * d.abs().mean()
            l_syn = l_syn + args.bce * (-(y * log_p + (1 - y) * log_q).index_select(1, est).mean())
            l_syn = l_syn + 0.5 * ((rotation_from_6d_torch(rot6) - T["rot_res"][it]) ** 2).sum((1, 2)).mean()
            l_syn = l_syn + 0.002 * ((t - T["t_res"][it]).abs() * 100.0).clamp_max(10.0).mean()
            keep = (~still).float()
            l_syn = l_syn + 0.1 * ((ident - T["identity"][it]).abs().mean(1) * keep).sum() / keep.sum().clamp_min(1)
            # real frames and their next frames
            ri = torch.from_numpy(rng.choice(vid_idx, args.real_batch)).to(device)
            both = torch.cat([ri, R["next"][ri].long(), still_idx])
            xr, nr = R["x"][both], R["n"][both]
            wr, r6, tr, _ = model.forward_subset(xr, nr)
            k = len(ri)
            w0, w1, ws = wr[:k], wr[k:2 * k], wr[2 * k:]
            wv, xv, nv = wr[:2 * k], xr[:2 * k], nr[:2 * k]
            res = landmark_residual(wv, rotation_from_6d_torch(r6[:2 * k]), xv, nv + tmpl, b_sub)
            l_lmk = (res ** 2).sum(2).mean()
            dd = (wv - R["solver"][both[:2 * k]]).index_select(1, est)
            l_dist = (dd ** 2).mean() + 0.1 * dd.abs().mean()
            # the distillation in geometry: the face model's points under the output against
            # under the solver's output (cm^2; the benchmark's landmarks weigh feature_weight)
            dg = torch.einsum("bk,kpc->bpc", wv - R["solver"][both[:2 * k]], b_full) * 100.0
            l_geo = ((dg ** 2).sum(2) * pw).mean()
            l_feat = torch.zeros((), device=device)
            if args.w_feat > 0:
                pts = neutral_pts + torch.einsum("bk,kpc->bpc", wv, b_full)
                pts_s = neutral_pts + torch.einsum("bk,kpc->bpc", R["solver"][both[:2 * k]], b_full)
                df = (shape_features_torch(pts) - shape_features_torch(pts_s)) / feat_scale
                l_feat = (df.index_select(1, feat_cols) ** 2).mean()
            l_sparse = wv.mean()
            l_sym = ((wv - wv.index_select(1, mir)) ** 2).mean()
            l_temp = ((w0 - w1) ** 2).mean()
            smile = ws[:, SMILE].mean(1)
            is_s, is_n = (lab == 1).float(), (lab == 0).float()
            l_weak = (is_s * torch.relu(args.smile_target - smile) ** 2).sum() / is_s.sum().clamp_min(1)
            over = torch.relu(ws - args.neutral_max) ** 2
            l_weak = l_weak + (is_n * (over.sum(1) + torch.relu(smile - 0.5 * args.neutral_max) ** 2)).sum() \
                / is_n.sum().clamp_min(1)
            l_bank = torch.zeros((), device=device)
            if cons is not None and args.w_bank > 0:
                # MediaPipe's own changes under re-tracking (copy - original, other photos), added to
                # the synthetic batch's inputs (a still's to its neutral, a frame's to its displacement)
                xb, nb, sb = x, n, still
                if args.bank_real:  # the real batch too (a still: x = 0, the residual on its neutral)
                    xb, nb = torch.cat([x, xr]), torch.cat([n, nr])
                    sb = torch.cat([still, xr.flatten(1).abs().amax(1) == 0])
                r = bank[torch.randint(len(bank), (len(xb),), device=device)]
                r = r * (args.bank_scale * torch.rand(len(xb), 1, 1, device=device) if args.bank_scale_random
                         else args.bank_scale)
                xp = torch.where(sb[:, None, None], xb, xb + r)
                np_ = torch.where(sb[:, None, None], nb + r, nb)
                model.eval()
                with torch.no_grad():
                    wt_b = model.forward_subset(xb, nb)[0]
                model.train()
                db = (model.forward_subset(xp, np_)[0] - wt_b).index_select(1, est)
                l_bank = (db ** 2).mean()
            l_cons = torch.zeros((), device=device)
            l_depth = torch.zeros((), device=device)
            if cons is not None and args.w_cons > 0:
                ci = torch.from_numpy(rng.choice(len(cons["x"]), min(args.cons_batch, len(cons["x"])),
                                                 replace=False)).to(device)
                model.eval()
                with torch.no_grad():
                    wt = model.forward_subset(C["xt"][ci], C["nt"][ci])[0]
                model.train()
                wc = model.forward_subset(C["x"][ci], C["n"][ci])[0]
                dc = (wc - wt).index_select(1, est)
                l_cons = (dc ** 2).mean()
            if aug is not None and args.w_depth > 0:
                vi = both[:2 * k]
                s_pred = 1.0 + (tr[:2 * k] * t_al[vi]).sum(1) / d0[vi]
                l_depth = ((s_pred - s_tgt[vi]) ** 2).mean()
            l_teach = torch.zeros((), device=device)
            if teachers and args.w_teach > 0:
                # distillation of an ensemble (Hinton et al. 2015): the student follows the teachers'
                # mean on the synthetic batch, the real batch and the re-tracked copies
                dts = [(bs - teach(x, n)).index_select(1, est)]
                if "real" in args.teach_on:
                    dts.append((wr - teach(xr, nr)).index_select(1, est))
                if "copies" in args.teach_on and cons is not None and args.w_cons > 0:
                    dts.append((wc - teach(C["x"][ci], C["n"][ci])).index_select(1, est))
                l_teach = sum((dt ** 2).mean() for dt in dts) / len(dts)
            loss = (l_syn + args.w_teach * l_teach + args.w_cons * l_cons + args.w_bank * l_bank
                    + args.w_depth * l_depth
                    + args.w_lmk * l_lmk + args.w_distill * l_dist + args.w_sparse * l_sparse
                    + args.w_geo * l_geo + args.w_feat * l_feat + args.w_sym * l_sym
                    + args.w_temporal * l_temp + args.w_weak * l_weak)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            for name, v in (("loss", loss), ("syn", l_syn), ("lmk", l_lmk), ("distill", l_dist), ("geo", l_geo),
                            ("feat", l_feat), ("temporal", l_temp), ("weak", l_weak), ("cons", l_cons),
                            ("bank", l_bank), ("teach", l_teach),
                            ("depth", l_depth)):
                sums[name] = sums.get(name, 0.0) + float(v.detach())
        if (epoch + 1) % args.log_every == 0 or epoch + 1 == args.epochs:
            row = {"epoch": epoch + 1, "elapsed_s": time.time() - t0,
                   **{k: v / steps_per_epoch for k, v in sums.items()}}
            model.cpu()
            for name, prep in evals.items():
                ev = evaluate(model, prep, np.zeros(52, np.float32))
                row[f"{name}_mae"] = ev["mae"]
                row[f"{name}_rot_deg"] = ev["rotation_err_deg_median"]
            lf = real_label_free(model, real)
            row["real_pooled_r"] = lf["pooled_r"]
            row["real_min_clip_mean_r"] = min(lf["clip_mean_r"].values())
            row["london_odd"] = london_train(model, real)
            model.to(device)
            curve.append(row)
            log.info("epoch %d: %s", epoch + 1, json.dumps(row, default=lambda v: round(v, 4)))
            if args.checkpoint:  # a run stopped at a time limit keeps its last logged state
                torch.save(model.state_dict(), args.out)
    model.cpu().eval()
    return model, curve


def consistency_pairs(real: dict, aug: dict, holdout: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Inputs of the consistency loss from real_aug.py's re-tracked stills, (M', 146, 3) float32 each.

    ``holdout``: names of stills (``real["clip_names"]``) whose copies and pairs are left out
    (the engine tests' stills, :data:`training.face_recon.real_aug.TEST_STILLS`, so the
    stability, rotation and flip tests measure held-out photos).

    Per copy of a still: ``x``/``n`` the copy read against a neutral and ``xt``/``nt`` the
    original read against the same neutral (the target's inputs). The neutrals: the still
    itself (``x`` = copy - still, ``xt`` = 0) and, for a copy of a pair's expression photo, the
    pair's neutral photo (``x`` = copy - neutral photo, ``xt`` = expression - neutral photo), and
    with ``aug_copy``, the same copy of both photos of a pair (``x`` = copy of the expression -
    copy of the neutral, ``n`` = copy of the neutral - template).
    """
    sub = np.asarray(N.SUBSET)
    head = real["head"][:, sub].astype(np.float32)
    names = np.asarray([str(c) for c in real["clip_names"]])[real["clip"].astype(int)]
    held = np.isin(names, np.asarray(holdout, dtype=str))
    keep = ~held[aug["aug_src"]]
    aug = {**aug, **{k: aug[k][keep] for k in ("aug_head", "aug_src", "aug_kind", "aug_copy") if k in aug}}
    pk = ~(held[aug["pair_neutral"]] | held[aug["pair_expr"]])
    aug["pair_neutral"], aug["pair_expr"] = aug["pair_neutral"][pk], aug["pair_expr"][pk]
    src = aug["aug_src"]
    tmpl = N.template()[sub].astype(np.float32)
    xs = [aug["aug_head"] - head[src]]
    ns = [real["n"][src]]
    xts = [np.zeros_like(xs[0])]
    nts = [real["n"][src]]
    for jn, je in zip(aug["pair_neutral"], aug["pair_expr"]):
        c = np.flatnonzero(src == je)
        xs.append(aug["aug_head"][c] - head[jn])
        ns.append(np.repeat(real["n"][jn][None], len(c), 0))
        xts.append(np.repeat((head[je] - head[jn])[None], len(c), 0))
        nts.append(ns[-1])
        if "aug_copy" in aug:  # both photos of the pair perturbed alike (the same copy)
            cn = np.flatnonzero(src == jn)
            by_copy = {int(aug["aug_copy"][i]): i for i in cn}
            for i in c:
                i_n = by_copy.get(int(aug["aug_copy"][i]))
                if i_n is None:
                    continue
                xs.append((aug["aug_head"][i] - aug["aug_head"][i_n])[None])
                ns.append((aug["aug_head"][i_n] - tmpl)[None])
                xts.append((head[je] - head[jn])[None])
                nts.append(real["n"][jn][None])
    return {k: np.concatenate(v).astype(np.float32) for k, v in (("x", xs), ("n", ns), ("xt", xts), ("nt", nts))}


def feature_points() -> np.ndarray:
    """Indices of the landmarks the fidelity geometry reads (avatar_app/evaluation/geometry.py):
    lids, eye corners, brows' upper edges, the nose ridge, the mouth corners and inner lips."""
    from avatar_app.core import landmarks as lmk

    idx = {33, 133, 263, 362, 197, 61, 291, 13, 14, 82, 87, 312, 317}
    for group in (lmk.LEFT_EYE_UPPER, lmk.LEFT_EYE_LOWER, lmk.RIGHT_EYE_UPPER, lmk.RIGHT_EYE_LOWER,
                  lmk.LEFT_BROW_UPPER, lmk.RIGHT_BROW_UPPER):
        idx.update(int(i) for i in group)
    return np.array(sorted(idx), np.int64)


def load_state(path: Path, rig, hidden) -> FaceReconNet:
    """A state dict of this script as a FaceReconNet in eval mode (the trunk reads the whole neutral)."""
    model = FaceReconNet(rig.mirror, rig.num_identity, hidden=tuple(hidden), trunk_reads_neutral=True)
    model.load_state_dict(torch.load(path, map_location="cpu"), strict=False)
    return model.eval()


def still_version(prep: dict) -> dict:
    """A prepared synthetic set given as stills (``x`` = 0, ``n`` = face - template)."""
    out = dict(prep)
    out["n"] = prep["x"] + prep["n"]
    out["x"] = np.zeros_like(prep["x"])
    return out


def export_onnx(state: Path, real_path: Path, out: Path, args) -> None:
    """Write the ONNX and its val/calib sets from a trained state dict (CPU; see train.export).

    The val/calib sets (float16, subset only, as train.write_sets) hold half synthetic
    held-out samples (seed 12) and half real video frames' runtime inputs (val: even sample indices
    of the real set, calib: odd ones), 256 of each kind per set.
    """
    from training.face_recon.train import export

    rig = load_face_model()
    sd = torch.load(state, map_location="cpu")
    cfg = json.loads(state.with_suffix(".json").read_text())["config"]
    model = FaceReconNet(rig.mirror, rig.num_identity, hidden=tuple(cfg["hidden"]),
                         trunk_reads_neutral=cfg["trunk_reads_neutral"])
    model.load_state_dict(sd, strict=False)
    export(model, out, {})
    write_sets(real_path, out, rig)


def write_sets(real_path: Path, out: Path, rig=None) -> None:
    """The val/calib sets beside the ONNX ``out`` (``<stem>.val.npz``, ``<stem>.calib.npz``; see
    :func:`export_onnx`)."""
    rig = rig if rig is not None else load_face_model()
    syn = synthetic_set(SYN_HELDOUT_SEED, 1024, rig)
    real = load_real(real_path)
    rng = np.random.default_rng(5)
    si = rng.permutation(len(syn["subject"]))
    # video frames only, none with an all-zero input (a still, a clip's first frame): the two sets
    # must not share a sample
    moving = np.flatnonzero(~real["still"] & (np.abs(real["x"]).reshape(len(real["x"]), -1).max(1) > 0))
    ri = moving[rng.permutation(len(moving))]
    sub = np.asarray(N.SUBSET)
    for j, name in enumerate(("val", "calib")):
        f = D.full_inputs(syn, si[j * 256:(j + 1) * 256])
        r_idx = ri[ri % 2 == j][:256]
        feeds = {}
        for key, rk in (("landmarks", "x"), ("neutral", "n")):
            arr = np.zeros((len(f[key]) + len(r_idx), 478, 3), np.float16)  # outside the subset: 0
            arr[:len(f[key]), sub] = f[key][:, sub]
            arr[len(f[key]):, sub] = real[rk][r_idx]
            feeds[key] = arr
        np.savez_compressed(out.with_name(f"{out.stem}.{name}.npz"), **feeds)


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--real", type=Path, default=Path("tmp/face_recon_real.npz"), help="real_data.py's set")
    ap.add_argument("--out", type=Path, default=Path("tmp/face_recon_real.pt"),
                    help="state dict to write (metrics JSON beside it); with --export: the ONNX")
    ap.add_argument("--export", type=Path, default=None, help="export this state dict to --out (ONNX) and stop")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--synthetic", type=int, default=120000)
    ap.add_argument("--still-share", type=float, default=0.3, help="synthetic samples given as stills")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--real-batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--bce", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, nargs="+", default=[768, 384])
    ap.add_argument("--trunk-reads-neutral", action=argparse.BooleanOptionalAction, default=True,
                    help="the trunk reads the whole neutral input (a still's expression is only there)")
    ap.add_argument("--w-lmk", type=float, default=0.3, help="dense landmark loss (cm^2)")
    ap.add_argument("--w-distill", type=float, default=1.0, help="distillation to the geometric solver")
    ap.add_argument("--w-geo", type=float, default=0.0,
                    help="distillation in geometry: face-model points under the output vs the solver's (cm^2)")
    ap.add_argument("--feature-weight", type=float, default=10.0,
                    help="weight of the fidelity geometry's landmarks in --w-geo (others 1)")
    ap.add_argument("--w-sparse", type=float, default=0.005)
    ap.add_argument("--w-sym", type=float, default=0.01)
    ap.add_argument("--w-temporal", type=float, default=0.5)
    ap.add_argument("--w-weak", type=float, default=1.0, help="London weak labels")
    ap.add_argument("--smile-target", type=float, default=0.6)
    ap.add_argument("--neutral-max", type=float, default=0.15)
    ap.add_argument("--aug", type=Path, default=None,
                    help="real_aug.py's file: the consistency (--w-cons) and depth (--w-depth) losses")
    ap.add_argument("--w-cons", type=float, default=0.0,
                    help="consistency of the output on re-tracked (JPEG, shifted, rotated, rescaled) stills")
    ap.add_argument("--cons-batch", type=int, default=256)
    ap.add_argument("--w-depth", type=float, default=0.0,
                    help="depth scale of the translation output vs the solver's on real video frames")
    ap.add_argument("--cons-holdout", nargs="*", default=list(TEST_STILLS),
                    help="stills left out of the consistency loss (default: the engine tests' stills)")
    ap.add_argument("--w-bank", type=float, default=0.0,
                    help="consistency of the output on synthetic inputs under the stills' re-tracking residuals")
    ap.add_argument("--bank-real", action="store_true",
                    help="--w-bank on the real batch too (video frames, stills), not only the synthetic one")
    ap.add_argument("--bank-scale", type=float, default=1.0, help="scale of the residuals of --w-bank")
    ap.add_argument("--bank-scale-random", action="store_true",
                    help="per sample a uniform scale in [0, --bank-scale] instead of the fixed one")
    ap.add_argument("--w-feat", type=float, default=0.0,
                    help="distillation of the fidelity features (--feat) of the face model under the output vs "
                         "under the solver's output, each over the solver's sd on the video frames")
    ap.add_argument("--feat", nargs="+", default=list(FEAT_DEFAULT), help="features of --w-feat")
    ap.add_argument("--init", type=Path, default=None, help="start from this state dict (fine-tuning)")
    ap.add_argument("--teacher", type=Path, nargs="*", default=None,
                    help="state dicts whose mean blendshapes the network must follow (ensemble distillation)")
    ap.add_argument("--w-teach", type=float, default=0.0, help="weight of the --teacher term")
    ap.add_argument("--teach-on", nargs="+", choices=("real", "copies"), default=["real", "copies"],
                    help="batches besides the synthetic one the --teacher term covers (real: the video "
                         "frames and photos, whose other target is the solver's; copies: the re-tracked stills)")
    ap.add_argument("--checkpoint", action="store_true", help="write --out at every logged epoch too")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    if args.export is not None:
        export_onnx(args.export, args.real, args.out, args)
        return 0
    t = time.time()
    rig = load_face_model()
    syn = build_training_set(D.prepare(synthetic_set(SYN_TRAIN_SEED, args.synthetic, rig,
                                                     small_share=S.SMALL_SHARE)), None, 0)
    ho = D.prepare(synthetic_set(SYN_HELDOUT_SEED, 5000, rig))
    real = load_real(args.real)
    real = {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in real.items()}
    aug = load_real(args.aug) if args.aug is not None else None
    log.info("data ready in %.0f s", time.time() - t)
    model, curve = fit_real(syn, real, {"syn": ho, "syn_still": still_version(ho)}, args, args.device, aug)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out)
    cfg = {k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) and v
               and isinstance(v[0], Path) else v) for k, v in vars(args).items()}
    res = {"config": cfg, "train_seconds": time.time() - t, "curve": curve,
           "heldout_synthetic": {k: v for k, v in evaluate(model, ho, syn["weights"].mean(0)).items()
                                 if k != "per_shape"},
           "real": real_label_free(model, real), "london_odd": london_train(model, real)}
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    log.info("done in %.0f s: %s", res["train_seconds"], json.dumps(res["real"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
