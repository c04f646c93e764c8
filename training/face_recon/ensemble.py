"""An ensemble of face_recon candidates exported as one ONNX (issue 17 part 3).

Usage (repository root)::

    python -m training.face_recon.ensemble --members tmp/ens/H0.pt tmp/ens/H1.pt ... \\
        --real tmp/face_recon_real.npz --out models/face_recon.onnx

Each member is a state dict of :mod:`training.face_recon.train_real` (the trunk reading the whole
neutral, ``--hidden`` widths as given here). The exported graph runs every member on the same
inputs and averages their outputs: blendshapes, translation and identity arithmetically, the
rotation as the mean 6D vector made orthonormal again (Gram-Schmidt, as each member does). The
inputs, outputs and metadata are those of a single model (``models/face_recon.md``), so the
engine layer, its verification and the runtime take it unchanged.

Why: a single candidate's still-photo outputs move with MediaPipe's re-tracking changes (JPEG,
in-plane rotation, rescale) far more on photos it was not trained on than on those it was, and by
different amounts from one variant to the next (models/face_recon.md, "Candidate H"); an average
of independently seeded members keeps what they share and cancels part of what each learnt alone
(Lakshminarayanan et al. 2017, "Simple and scalable predictive uncertainty estimation using deep
ensembles").
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch
from torch import nn

from avatar_app.avatar.face_model import load_face_model
from training.face_recon.model import FaceReconNet, orthonormal_6d

_log = logging.getLogger(__name__)


class EnsembleNet(nn.Module):
    """The mean of several :class:`FaceReconNet` (same inputs and outputs as one).

    Args:
        members: the trained networks (eval mode is set here).
    """

    def __init__(self, members: list[FaceReconNet]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = nn.ModuleList(members)
        self.eval()

    def freeze_for_export(self) -> None:
        """Each member's export constants (:meth:`FaceReconNet.freeze_for_export`)."""
        for m in self.members:
            m.freeze_for_export()
        self.eval()

    def forward(self, landmarks: torch.Tensor, neutral: torch.Tensor):
        """(B, 478, 3) x 2 float32 metres -> blendshapes (B, 52), rotation_6d (B, 6), translation (B, 3),
        identity (B, K): the members' means (rotation re-orthonormalised)."""
        outs = [m(landmarks, neutral) for m in self.members]
        k = float(len(outs))
        bs = sum(o[0] for o in outs) / k
        rot = orthonormal_6d(sum(o[1] for o in outs) / k)
        t = sum(o[2] for o in outs) / k
        ident = sum(o[3] for o in outs) / k
        return bs, rot, t, ident


def main(argv: list[str] | None = None) -> int:
    from training.face_recon.train import export
    from training.face_recon.train_real import load_state, write_sets

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=Path, nargs="+", required=True, help="train_real state dicts")
    ap.add_argument("--hidden", type=int, nargs="+", default=[768, 384])
    ap.add_argument("--real", type=Path, default=Path("tmp/face_recon_real.npz"), help="real_data.py's set")
    ap.add_argument("--out", type=Path, required=True, help="the ONNX to write (val/calib sets beside it)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rig = load_face_model()
    net = EnsembleNet([load_state(p, rig, args.hidden) for p in args.members])
    export(net, args.out, {"ensemble_members": len(args.members)})
    write_sets(args.real, args.out, rig)
    _log.info("wrote %s: the mean of %d members", args.out, len(args.members))
    return 0


if __name__ == "__main__":
    sys.exit(main())
