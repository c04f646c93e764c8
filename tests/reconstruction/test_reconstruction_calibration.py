"""RunningPercentiles: schedule, percentiles, determinism."""
from __future__ import annotations

import numpy as np
import pytest

from avatar_app.core.errors import InputError
from avatar_app.reconstruction import RunningPercentiles


def test_percentiles_match_numpy_during_warmup():
    rng = np.random.default_rng(3)
    rp = RunningPercentiles([10, 50, 90], warmup_s=10.0)
    xs = rng.normal(size=(100, 3))
    assert rp.value is None
    for i, x in enumerate(xs):
        assert rp.update(x, i / 30)
    assert rp.count == 100
    expected = [np.percentile(xs[:, k], q) for k, q in enumerate((10, 50, 90))]
    np.testing.assert_allclose(rp.value, expected)


def test_schedule_slows_down_after_warmup():
    rp = RunningPercentiles([50], warmup_s=1.0, slow_interval_s=0.5, capacity=100)
    kept = [rp.update(np.array([float(i)]), i / 30) for i in range(300)]  # 10 s at 30 fps
    assert all(kept[:30])  # every frame in the first second
    # Afterwards about two per second.
    assert sum(kept[30:]) == pytest.approx(9 * 2, abs=2)


def test_ring_buffer_forgets_the_oldest():
    rp = RunningPercentiles([0, 100], warmup_s=100.0, capacity=10)
    for i in range(25):
        rp.update(np.array([float(i), float(i)]), float(i))
    assert rp.count == 10
    np.testing.assert_allclose(rp.value, [15.0, 24.0])


def test_non_finite_samples_are_skipped_and_shapes_checked():
    rp = RunningPercentiles([50, 50])
    assert not rp.update(np.array([np.nan, 1.0]), 0.0)
    assert rp.value is None
    with pytest.raises(InputError, match="shape"):
        rp.update(np.zeros(3), 0.0)
    with pytest.raises(InputError):
        RunningPercentiles([120.0])
    rp.update(np.array([1.0, 2.0]), 0.0)
    rp.reset()
    assert rp.value is None and rp.count == 0


def test_sample_schedule_keeps_every_warmup_sample_then_one_per_interval_in_a_ring():
    from avatar_app.reconstruction.calibration import SampleSchedule

    s = SampleSchedule(warmup_s=1.0, slow_interval_s=0.5, capacity=4)
    slots = [s.admit(t) for t in (0.0, 0.1, 0.2, 0.3, 1.05, 1.2, 1.6, 1.7, 2.2)]
    # warm-up: 4 samples (slots 0-3); then 1.05 (ring wraps to 0), 1.2 skipped, 1.6 kept (slot 1),
    # 1.7 skipped, 2.2 kept (slot 2)
    assert slots == [0, 1, 2, 3, 0, None, 1, None, 2]
    assert s.count == 4
    s.reset()
    assert s.count == 0 and s.in_warmup(100.0) and s.admit(100.0) == 0
    import pytest

    from avatar_app.core.errors import InputError
    with pytest.raises(InputError):
        SampleSchedule(warmup_s=1.0, slow_interval_s=0.0, capacity=4)
