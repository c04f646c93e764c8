"""An engine whose model file is damaged says it could not be opened, not that a request failed (trial)."""
from __future__ import annotations

from avatar_app.inference import EngineCache
from avatar_app.pipeline.engines import EngineController


def test_a_damaged_model_at_start_is_said_to_be_unopened(tmp_path):
    bad = tmp_path / "face_recon.onnx"
    bad.write_bytes(b"not an onnx file" * 10)
    ctl = EngineController(models={"face_recon": bad, "speech2face": None}, isolate=False,
                           cache=EngineCache(tmp_path / "cache"), calibration_root=tmp_path / "calib")
    try:
        ctl.start().result(timeout=60)
        text = ctl.verification_text("face_recon")
        assert text.startswith("Could not be opened: ") and "not a readable ONNX file" in text, text
        assert "Last request failed" not in text
    finally:
        ctl.close()
