"""The face_recon network (PyTorch): a mirror-symmetric MLP over 146 aligned landmarks.

Inputs (see :mod:`avatar_app.reconstruction.normalise`): ``landmarks`` and
``neutral``, both (B, 478, 3) float32 metres in the head frame. The graph
gathers MediaPipe's 146-landmark blendshape subset of each and scales to
centimetres.

Why an MLP and not MediaPipe's MLP-Mixer: after the rigid alignment the
input is a small displacement field of fixed topology (146 points x 3), so
the per-token mixing of a Mixer buys little over one dense layer that sees
every point; a 3-layer MLP is about 0.6 M multiply-adds (a few hundredths of
a millisecond on one CPU core), trains on a 2-core CPU in minutes, and
quantises to INT8 with plain QDQ MatMuls.

Structure:

- trunk: [expression (438), neutral (438)] -> 512 -> 256 (ReLU6, He init);
- inputs standardised by their training mean and sd, clipped to +-6 sd;
- heads: ``blendshapes`` (52, sigmoid; tongueOut masked to 0: no landmark
  sees the tongue), ``rotation_6d`` (6, added to the identity rotation's
  6D vector, then made orthonormal), ``translation`` (3, metres, scaled by 0.05);
- ``identity`` (K): a linear map of the neutral only (438 -> K; the face
  model's identity morphs are linear), so the face shape does not flicker
  with expressions.

Mirror symmetry by construction: the network runs on the input and on its
mirror image (x -> -x, Left/Right landmarks swapped) in one batch, and the
mirrored outputs are mapped back (Left/Right blendshapes swapped, rotation
conjugated by diag(-1, 1, 1), translation x negated) and averaged; a
horizontally flipped face therefore gives exactly swapped outputs.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES, NUM_BLENDSHAPES, mirror_index
from avatar_app.reconstruction.normalise import SUBSET
from training.face_recon.data import NOT_ESTIMATED  # one definition, importable without torch

TRANSLATION_SCALE = 0.05  # metres per unit of the translation head
FEATURE_CLIP = 6.0  # standardised inputs are clipped to +-6 sd
IDENTITY_CLIP = 8.0  # ... and to +-8 sd on the identity's own path


class FaceReconNet(nn.Module):
    """Mirror-symmetric MLP (see the module docstring).

    Args:
        mirror: (478,) int mirror partner of each landmark (the face model's ``mirror``).
        num_identity: K identity coefficients.
        hidden: trunk widths.
        symmetric: average with the mirrored pass (always True for export).
        use_z: read MediaPipe's depth channel (False zeroes it: the ablation of train.py).
        trunk_reads_neutral: the trunk reads the whole neutral shape (else only the
            identity coefficients: a bottleneck against memorising training subjects).
        dropout: dropout after each hidden layer in training.
        noise: sd of the training-time noise on standardised inputs (hidden layers: that
            fraction of a sixth of their batch maximum); 0 turns it off.
    """

    def __init__(self, mirror: np.ndarray, num_identity: int = 15, hidden=(512, 256),
                 symmetric: bool = True, use_z: bool = True, noise: float = 0.05,
                 trunk_reads_neutral: bool = True, dropout: float = 0.0):
        super().__init__()
        self.use_z = use_z
        self.noise = noise
        self.trunk_reads_neutral = trunk_reads_neutral
        self.register_buffer("ident_full", None)  # (K, 478, 3), set by freeze_for_export
        self.dropout = dropout
        sub = np.asarray(SUBSET, np.int64)
        pos = {int(j): i for i, j in enumerate(sub)}
        local = np.array([pos[int(np.asarray(mirror)[j])] for j in sub], np.int64)
        self.register_buffer("subset", torch.from_numpy(sub))
        self.register_buffer("subset_mirror", torch.from_numpy(local))  # mirror partners, subset positions
        self.register_buffer("flip", torch.tensor([-1.0, 1.0, 1.0]))
        self.register_buffer("bs_mirror", torch.tensor(mirror_index(), dtype=torch.int64))
        mask = torch.ones(NUM_BLENDSHAPES)
        for n in NOT_ESTIMATED:
            mask[BLENDSHAPE_NAMES.index(n)] = 0.0
        self.register_buffer("bs_mask", mask)
        self.register_buffer("rot_base", torch.tensor([1.0, 0, 0, 0, 1, 0]))
        # the 6D vector of M R M from R's, M = diag(-1, 1, 1): col1 -> -M c1, col2 -> M c2
        self.register_buffer("rot_flip", torch.tensor([1.0, -1, -1, -1, 1, 1]))
        self.symmetric = symmetric
        n_in = len(SUBSET) * 3
        # per-feature standardisation on all 478 points (set from the training data by
        # set_input_stats; points outside the subset keep mean 0, sd 1 and are never read)
        self.register_buffer("x_mean", torch.zeros(478, 3))
        self.register_buffer("x_sd", torch.ones(478, 3))
        self.register_buffer("n_mean", torch.zeros(478, 3))
        self.register_buffer("n_sd", torch.ones(478, 3))
        self.register_buffer("clip_hi", torch.tensor([FEATURE_CLIP]))
        self.register_buffer("clip_lo", torch.tensor([-FEATURE_CLIP]))
        # the identity reads its own copy of the standardised neutral, clipped wider: a separate
        # tensor that no quantised operator consumes, so it stays float32 in the INT8 file
        self.register_buffer("id_clip_hi", torch.tensor([IDENTITY_CLIP]))
        self.register_buffer("id_clip_lo", torch.tensor([-IDENTITY_CLIP]))
        layers, d = [], n_in + (n_in if trunk_reads_neutral else num_identity)
        for h in hidden:
            # ReLU6 (Howard et al., MobileNets 2017): a bounded activation quantises finely in
            # INT8 (a per-tensor scale over 0..6 instead of over a long ReLU tail)
            layers += [nn.Linear(d, h), nn.ReLU6()]
            d = h
        self.trunk = nn.Sequential(*layers)
        self.head_bs = nn.Linear(d, NUM_BLENDSHAPES)
        self.head_rot = nn.Linear(d, 6)
        self.head_t = nn.Linear(d, 3)
        # identity: linear in the neutral's shape, as the face model's identity morphs are
        # (one Gemm also keeps it exact under INT8 to a few hundredths)
        self.ident = nn.Sequential(nn.Linear(n_in, num_identity))
        for mod in list(self.trunk) + list(self.ident):
            if isinstance(mod, nn.Linear):  # He init: the default shrinks the signal 6x per ReLU layer
                nn.init.kaiming_normal_(mod.weight, nonlinearity="relu")
                nn.init.zeros_(mod.bias)
        for head in (self.head_rot, self.head_t):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def set_input_stats(self, x: np.ndarray, n: np.ndarray, floor_m: float = 5e-4) -> None:
        """Standardise each input feature by its training mean and sd (sd floored at ``floor_m``).

        Both signs of x are seen in training through the mirrored pass, so the
        statistics are taken over the data and its mirror image (keeps the
        network's mirror symmetry exact: mirroring then commutes with the
        standardisation). Without ``use_z`` the depth features get an infinite
        sd, i.e. they are read as 0.

        Args:
            x, n: (N, 146, 3) training inputs on the subset, metres.
        """
        mir = self.subset_mirror.numpy()
        flip = self.flip.numpy()
        sub = self.subset.numpy()
        for arr, mean_name, sd_name in ((x, "x_mean", "x_sd"), (n, "n_mean", "n_sd")):
            both = np.concatenate([arr, arr[:, mir] * flip])
            mean = both.mean(0)
            sd = np.maximum(both.std(0), floor_m)
            if not self.use_z:
                sd[:, 2] = 1e9
            getattr(self, mean_name)[sub] = torch.from_numpy(mean.astype(np.float32))
            getattr(self, sd_name)[sub] = torch.from_numpy(sd.astype(np.float32))

    def _standardise(self, v: torch.Tensor, mean: torch.Tensor, sd: torch.Tensor,
                     identity_path: bool = False) -> torch.Tensor:
        """(v - mean) / sd clipped to +-FEATURE_CLIP, by Sub, Div, Min, Max: operators ONNX
        Runtime's quantiser leaves in float, so INT8 sees only bounded, standardised values
        (never metres); the clip also keeps an out-of-range face inside the training range."""
        z = (v - mean) / sd
        if identity_path:
            return torch.maximum(torch.minimum(z, self.id_clip_hi), self.id_clip_lo)
        return torch.maximum(torch.minimum(z, self.clip_hi), self.clip_lo)

    def _core(self, xs: torch.Tensor, ns: torch.Tensor, ident: torch.Tensor):
        b = xs.shape[0]
        xf, nf = xs.reshape(b, -1), ns.reshape(b, -1)
        if not self.trunk_reads_neutral:
            nf = ident.detach()
        if self.training and self.noise > 0:
            # training-time noise on the standardised inputs and the hidden layers, a few INT8
            # steps wide: the network learns not to hang on tiny differences (robust INT8/FP16,
            # and a ridge penalty for the linear identity head)
            xf = xf + self.noise * torch.randn_like(xf)
            nf = nf + self.noise * torch.randn_like(nf)
        h = torch.cat([xf, nf], 1)
        for mod in self.trunk:
            h = mod(h)
            if self.training and isinstance(mod, nn.ReLU6):
                if self.noise > 0:
                    h = h + self.noise * h.detach().amax(0, keepdim=True) / 6.0 * torch.randn_like(h)
                if self.dropout > 0:
                    h = nn.functional.dropout(h, self.dropout, True)
        return self.head_bs(h), self.head_rot(h), self.head_t(h)

    def forward(self, landmarks: torch.Tensor, neutral: torch.Tensor):
        """(B, 478, 3) x 2 -> blendshapes (B, 52), rotation_6d (B, 6), translation (B, 3), identity (B, K)."""
        xs = self._standardise(landmarks, self.x_mean, self.x_sd).index_select(1, self.subset)
        ns_full = self._standardise(neutral, self.n_mean, self.n_sd)
        ns_id = self._standardise(neutral, self.n_mean, self.n_sd, identity_path=True)
        w_full = self.ident_full if self.ident_full is not None else self._identity_weight_full()
        # an Einsum straight from the standardised neutral: ONNX Runtime's INT8 quantiser leaves
        # it in float, so the identity (a long dot product) keeps its precision
        # "- (-bias)", not "+ bias": an Add would be quantised, a Sub is not
        ident = torch.einsum("bpc,kpc->bk", ns_id, w_full) - (-self.ident[0].bias)
        return self._forward_standardised(xs, ns_full.index_select(1, self.subset), ident)

    def forward_subset(self, x: torch.Tensor, n: torch.Tensor, with_log_probs: bool = False):
        """As :meth:`forward` on inputs already reduced to the subset, (B, 146, 3) each (training).

        With ``with_log_probs`` a fifth output is the pair (log p, log(1 - p)), each (B, 52), of
        the (mirror-averaged) blendshape probabilities, computed from the logits without
        rounding p: the cross-entropy loss of train.py needs them where the sigmoid saturates.
        """
        sub = self.subset
        xs = self._standardise(x, self.x_mean[sub], self.x_sd[sub])
        ns = self._standardise(n, self.n_mean[sub], self.n_sd[sub])
        ns_id = self._standardise(n, self.n_mean[sub], self.n_sd[sub], identity_path=True)
        if self.training and self.noise > 0:
            ns_id = ns_id + self.noise * torch.randn_like(ns_id)
        ident = torch.einsum("bpc,kpc->bk", ns_id, self._identity_weight()) + self.ident[0].bias
        return self._forward_standardised(xs, ns, ident, with_log_probs)

    def _identity_weight_full(self) -> torch.Tensor:
        """(K, 478, 3): :meth:`_identity_weight` scattered onto all landmarks (zeros elsewhere)."""
        w = self._identity_weight()
        return torch.zeros(w.shape[0], 478, 3, device=w.device).index_copy(1, self.subset, w)

    def freeze_for_export(self) -> None:
        """Store the full identity weight as a constant (no scatter in the exported graph); eval mode."""
        self.eval()
        with torch.no_grad():
            self.ident_full = self._identity_weight_full().detach().clone()

    def _identity_weight(self) -> torch.Tensor:
        """(K, 146, 3) weights of the identity map, symmetrised: identity(n) = identity(mirror n)."""
        w = self.ident[0].weight.reshape(-1, len(SUBSET), 3)
        return 0.5 * (w + w.index_select(1, self.subset_mirror) * self.flip)

    def _forward_standardised(self, xs: torch.Tensor, ns: torch.Tensor, ident: torch.Tensor,
                              with_log_probs: bool = False):
        if self.symmetric:
            b = xs.shape[0]
            xm = xs.index_select(1, self.subset_mirror) * self.flip
            nm = ns.index_select(1, self.subset_mirror) * self.flip
            logit, rot, t = self._core(torch.cat([xs, xm], 0), torch.cat([ns, nm], 0), torch.cat([ident, ident], 0))
            passes = (logit[:b], logit[b:].index_select(1, self.bs_mirror))
            bs = 0.5 * (torch.sigmoid(passes[0]) + torch.sigmoid(passes[1]))
            rot = 0.5 * (rot[:b] + rot[b:] * self.rot_flip)
            t = 0.5 * (t[:b] + t[b:] * self.flip)
        else:
            logit, rot, t = self._core(xs, ns, ident)
            passes = (logit,)
            bs = torch.sigmoid(logit)
        out = (bs * self.bs_mask, orthonormal_6d(rot + self.rot_base), t * TRANSLATION_SCALE, ident)
        if not with_log_probs:
            return out
        # log of the mean of the passes' sigmoids: log mean exp(logsigmoid(z)), stable for any z
        z = torch.stack(passes)  # (passes, B, 52)
        k = float(np.log(len(passes)))
        log_p = torch.logsumexp(nn.functional.logsigmoid(z), 0) - k
        log_q = torch.logsumexp(nn.functional.logsigmoid(-z), 0) - k
        return out + ((log_p, log_q),)


def orthonormal_6d(v: torch.Tensor) -> torch.Tensor:
    """(B, 6) -> (B, 6): the first two columns made orthonormal (Gram-Schmidt), values in [-1, 1]."""
    a, b = v[:, :3], v[:, 3:]
    c1 = a / torch.sqrt((a * a).sum(1, keepdim=True) + 1e-12)
    b = b - (c1 * b).sum(1, keepdim=True) * c1
    c2 = b / torch.sqrt((b * b).sum(1, keepdim=True) + 1e-12)
    return torch.cat([c1, c2], 1)


def rotation_from_6d_torch(v: torch.Tensor) -> torch.Tensor:
    """(B, 6) -> (B, 3, 3) by Gram-Schmidt (Zhou et al., CVPR 2019); columns as in normalise.py."""
    a, b = v[:, :3], v[:, 3:]
    c1 = a / a.norm(dim=1, keepdim=True).clamp_min(1e-8)
    b = b - (c1 * b).sum(1, keepdim=True) * c1
    c2 = b / b.norm(dim=1, keepdim=True).clamp_min(1e-8)
    c3 = torch.cross(c1, c2, dim=1)
    return torch.stack([c1, c2, c3], dim=2)


def net_from_onnx(path, **options) -> FaceReconNet:
    """The PyTorch network holding the weights of an exported face_recon ONNX (for benchmarks).

    Args:
        path: the .onnx file written by train.py.
        **options: FaceReconNet options that change the graph (``hidden`` is read from the weights).

    Returns:
        FaceReconNet in eval mode with every parameter and buffer taken from the file.
    """
    import onnx
    from onnx import numpy_helper

    from avatar_app.avatar.face_model import load_face_model

    model = onnx.load(str(path))
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    hidden, i = [], 0
    while f"trunk.{i}.weight" in init:
        hidden.append(int(init[f"trunk.{i}.weight"].shape[0]))
        i += 2
    for node in model.graph.node:  # Constant nodes hold folded values too
        if node.op_type == "Constant" and node.attribute:
            init.setdefault(node.output[0], numpy_helper.to_array(node.attribute[0].t))
    k = int(init["ident_full"].shape[0])
    n_first = int(init["trunk.0.weight"].shape[1])
    rig = load_face_model()
    net = FaceReconNet(rig.mirror, k, hidden=tuple(hidden),
                       trunk_reads_neutral=n_first == 2 * len(SUBSET) * 3, **options)
    state = net.state_dict()
    for name in state:
        if name in init:
            state[name] = torch.from_numpy(np.array(init[name]))
    # the (already symmetric) identity weight is exported as ident_full: take its subset rows;
    # the bias is the negated constant the Sub after the Einsum subtracts
    full = init["ident_full"][:, np.asarray(SUBSET)]
    state["ident.0.weight"] = torch.from_numpy(np.array(full.reshape(k, -1)))
    einsum_out = next(n.output[0] for n in model.graph.node if n.op_type == "Einsum")
    sub = next(n for n in model.graph.node if n.op_type == "Sub" and n.input[0] == einsum_out)
    state["ident.0.bias"] = torch.from_numpy(-np.array(init[sub.input[1]]).reshape(k))
    net.load_state_dict(state)
    net.freeze_for_export()
    return net
