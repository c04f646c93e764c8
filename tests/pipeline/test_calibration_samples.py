"""INT8 calibration samples: a frame offered again with the same inputs is not kept (second trial,
ninth session: a one-frame file looping filled the set with copies of one frame)."""
from __future__ import annotations

import numpy as np

from avatar_app.pipeline.calibration import SampleCollector


def test_repeated_inputs_are_kept_once_and_new_ones_are_kept():
    def fn(landmarks, neutral, audio):
        return None if landmarks is None else {"x": np.asarray(landmarks, np.float32)[None]}

    c = SampleCollector({"face": fn}, {}, None, target=10)
    still = np.arange(6, dtype=np.float32)
    for _ in range(5):
        c.add(still, None)
    assert c.counts() == {"face": 1}
    c.add(still + 1, None)
    c.add(None, None)  # no face: nothing
    c.add(still, None)  # the first one again, after another: kept (only a repeat of the last is dropped)
    assert c.counts() == {"face": 3}
    assert c.stacked("face")["x"].shape == (3, 6)
