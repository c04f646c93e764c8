"""Post-processing of every frame, live and offline: mouth fusion, tuning, expressions, filters."""
from avatar_app.fusion.mouth import AUDIO_TRUST, Fusion, FusionSettings, fuse_mouth

__all__ = ["AUDIO_TRUST", "Fusion", "FusionSettings", "fuse_mouth"]
