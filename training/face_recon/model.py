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

- trunk: [expression (438), neutral (438)] -> 512 -> 256 (ReLU, He init);
- heads: ``blendshapes`` (52, sigmoid; tongueOut masked to 0: no landmark
  sees the tongue), ``rotation_6d`` (6, added to the identity rotation's
  6D vector), ``translation`` (3, metres, scaled by 0.05);
- ``identity`` (K): a separate small MLP on the neutral only (438 -> 128 -> K),
  so the face shape does not flicker with expressions.

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

NOT_ESTIMATED = ("tongueOut",)
INPUT_SCALE = 100.0  # metres -> centimetres
TRANSLATION_SCALE = 0.05  # metres per unit of the translation head


class FaceReconNet(nn.Module):
    """Mirror-symmetric MLP (see the module docstring).

    Args:
        mirror: (478,) int mirror partner of each landmark (the face model's ``mirror``).
        num_identity: K identity coefficients.
        hidden: trunk widths.
        symmetric: average with the mirrored pass (always True for export).
    """

    def __init__(self, mirror: np.ndarray, num_identity: int = 15, hidden=(512, 256),
                 symmetric: bool = True):
        super().__init__()
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
        # per-feature standardisation (set from the training data by set_input_stats)
        self.register_buffer("x_mean", torch.zeros(n_in))
        self.register_buffer("x_scale", torch.full((n_in,), INPUT_SCALE))
        self.register_buffer("n_mean", torch.zeros(n_in))
        self.register_buffer("n_scale", torch.full((n_in,), INPUT_SCALE))
        layers, d = [], 2 * n_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        self.trunk = nn.Sequential(*layers)
        self.head_bs = nn.Linear(d, NUM_BLENDSHAPES)
        self.head_rot = nn.Linear(d, 6)
        self.head_t = nn.Linear(d, 3)
        self.ident = nn.Sequential(nn.Linear(n_in, 128), nn.ReLU(), nn.Linear(128, num_identity))
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
        network's mirror symmetry exact).

        Args:
            x, n: (N, 146, 3) training inputs on the subset, metres.
        """
        mir = self.subset_mirror.numpy()
        flip = self.flip.numpy()
        for arr, mean_name, scale_name in ((x, "x_mean", "x_scale"), (n, "n_mean", "n_scale")):
            both = np.concatenate([arr, arr[:, mir] * flip])
            mean = both.reshape(len(both), -1).mean(0)
            sd = np.maximum(both.reshape(len(both), -1).std(0), floor_m)
            getattr(self, mean_name).copy_(torch.from_numpy(mean.astype(np.float32)))
            getattr(self, scale_name).copy_(torch.from_numpy((1.0 / sd).astype(np.float32)))

    def _core(self, x: torch.Tensor, n: torch.Tensor):
        b = x.shape[0]
        xf = (x.reshape(b, -1) - self.x_mean) * self.x_scale
        nf = (n.reshape(b, -1) - self.n_mean) * self.n_scale
        h = self.trunk(torch.cat([xf, nf], 1))
        return self.head_bs(h), self.head_rot(h), self.head_t(h), self.ident(nf)

    def forward(self, landmarks: torch.Tensor, neutral: torch.Tensor):
        """(B, 478, 3) x 2 -> blendshapes (B, 52), rotation_6d (B, 6), translation (B, 3), identity (B, K)."""
        return self.forward_subset(landmarks.index_select(1, self.subset), neutral.index_select(1, self.subset))

    def forward_subset(self, x: torch.Tensor, n: torch.Tensor):
        """As :meth:`forward` on inputs already reduced to the subset, (B, 146, 3) each."""
        if self.symmetric:
            b = x.shape[0]
            xm = x.index_select(1, self.subset_mirror) * self.flip
            nm = n.index_select(1, self.subset_mirror) * self.flip
            logit, rot, t, ident = self._core(torch.cat([x, xm], 0), torch.cat([n, nm], 0))
            bs = torch.sigmoid(logit)
            bs = 0.5 * (bs[:b] + bs[b:].index_select(1, self.bs_mirror))
            rot = 0.5 * (rot[:b] + rot[b:] * self.rot_flip)
            t = 0.5 * (t[:b] + t[b:] * self.flip)
            ident = 0.5 * (ident[:b] + ident[b:])
        else:
            logit, rot, t, ident = self._core(x, n)
            bs = torch.sigmoid(logit)
        return bs * self.bs_mask, rot + self.rot_base, t * TRANSLATION_SCALE, ident


def rotation_from_6d_torch(v: torch.Tensor) -> torch.Tensor:
    """(B, 6) -> (B, 3, 3) by Gram-Schmidt (Zhou et al., CVPR 2019); columns as in normalise.py."""
    a, b = v[:, :3], v[:, 3:]
    c1 = a / a.norm(dim=1, keepdim=True).clamp_min(1e-8)
    b = b - (c1 * b).sum(1, keepdim=True) * c1
    c2 = b / b.norm(dim=1, keepdim=True).clamp_min(1e-8)
    c3 = torch.cross(c1, c2, dim=1)
    return torch.stack([c1, c2, c3], dim=2)
