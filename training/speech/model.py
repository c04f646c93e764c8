"""The speech2face network: a causal dilated temporal convolution network over log-mel.

Input ``features`` (B, T, 64) log-mel (avatar_app.speech.mel); output
``blendshapes`` (B, T, 52) in [0, 1], non-zero only for :data:`OUT_SHAPES`.
Frame t sees features t-R+1..t (R = receptive field, 65 frames = 0.65 s) and
predicts the mouth at its time minus the 20 ms look-ahead (the training
targets are shifted), so live use adds no look-ahead beyond 20 ms.

Architecture after the TCN of Bai, Kolter and Koltun ("An empirical
evaluation of generic convolutional and recurrent networks for sequence
modeling", 2018): residual blocks of causal dilated convolutions (kernel 3,
dilations 1 2 4 8 16 1), ReLU (quantises well to INT8), fixed per-band input
normalisation stored as buffers. A second head (training only) classifies the
15 Oculus visemes.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from avatar_app.core.blendshapes import BLENDSHAPE_NAMES
from avatar_app.speech.visemes import HAND_TABLE, NUM_VISEMES

#: Shapes the model drives: those the viseme table uses.
OUT_SHAPES: tuple[str, ...] = tuple(n for i, n in enumerate(BLENDSHAPE_NAMES) if HAND_TABLE[:, i].any())
OUT_INDEX = [BLENDSHAPE_NAMES.index(n) for n in OUT_SHAPES]


class CausalBlock(nn.Module):
    """h + ReLU(conv_dilated(left_pad(h)))."""

    def __init__(self, ch: int, k: int, dilation: int):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv = nn.Conv1d(ch, ch, k, dilation=dilation)
        self.mix = nn.Conv1d(ch, ch, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(F.pad(h, (self.pad, 0))))
        return h + self.mix(y)


class Speech2Face(nn.Module):
    """Causal TCN: (B, T, 64) log-mel -> (B, T, 52) weights [, (B, T, 15) viseme logits]."""

    def __init__(self, n_mels: int = 64, ch: int = 96, k: int = 3,
                 dilations: tuple[int, ...] = (1, 2, 4, 8, 16, 1)):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_mels))
        self.register_buffer("std", torch.ones(n_mels))
        scatter = torch.zeros(len(OUT_SHAPES), len(BLENDSHAPE_NAMES))
        scatter[torch.arange(len(OUT_SHAPES)), torch.tensor(OUT_INDEX)] = 1.0
        self.register_buffer("scatter", scatter)
        self.inp = nn.Conv1d(n_mels, ch, 1)
        self.blocks = nn.ModuleList([CausalBlock(ch, k, d) for d in dilations])
        self.head = nn.Conv1d(ch, len(OUT_SHAPES), 1)
        self.vis_head = nn.Conv1d(ch, NUM_VISEMES, 1)
        self.receptive_field = 1 + sum((k - 1) * d for d in dilations)

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        x = ((x - self.mean) / self.std).transpose(1, 2)
        h = F.relu(self.inp(x))
        for b in self.blocks:
            h = b(h)
        return F.relu(h)

    def forward(self, x: torch.Tensor, with_visemes: bool = False):
        h = self.trunk(x)
        y = torch.sigmoid(self.head(h)).transpose(1, 2) @ self.scatter
        if with_visemes:
            return y, self.vis_head(h).transpose(1, 2)
        return y


class ExportWrapper(nn.Module):
    """Inference-only forward (blendshapes only) for ONNX export."""

    def __init__(self, model: Speech2Face):
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.model(features)


def n_params(model: nn.Module) -> int:
    """Trainable parameter count."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def set_normalisation(model: Speech2Face, feats: np.ndarray) -> None:
    """Store per-band mean/std of (F, 64) training features in the model."""
    f = feats.astype(np.float32)
    model.mean.copy_(torch.from_numpy(f.mean(0)))
    model.std.copy_(torch.from_numpy(np.maximum(f.std(0), 1e-3)))
