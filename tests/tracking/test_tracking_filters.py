"""One Euro filter (Casiez, Roussel, Vogel, CHI 2012): step response, jitter, contract."""
from __future__ import annotations

import math

import numpy as np
import pytest

from avatar_app.core.errors import InputError, TrackingError
from avatar_app.fusion.filters import OneEuroFilter, smoothing_factor

FPS = 30.0


def _run(f: OneEuroFilter, xs: np.ndarray) -> np.ndarray:
    return np.array([f(x, i / FPS) for i, x in enumerate(xs)])


def test_smoothing_factor_matches_paper_formula():
    te, fc = 1 / 30, 1.0
    tau = 1 / (2 * math.pi * fc)
    assert smoothing_factor(te, fc) == pytest.approx(1 / (1 + tau / te))


def test_first_sample_passes_through_and_constant_is_kept():
    f = OneEuroFilter(min_cutoff_hz=1.0, beta=0.1)
    x = np.array([[1.0, -2.0], [3.0, 4.5]])
    np.testing.assert_array_equal(f(x, 0.0), x)
    for i in range(1, 20):
        np.testing.assert_allclose(f(x, i / FPS), x)


def test_step_is_followed_and_beta_reduces_lag():
    step = np.r_[np.zeros(10), np.ones(50)]
    slow = _run(OneEuroFilter(min_cutoff_hz=1.0, beta=0.0), step)
    fast = _run(OneEuroFilter(min_cutoff_hz=1.0, beta=5.0), step)
    # Monotone, no overshoot, converges.
    assert np.all(np.diff(slow) >= -1e-12) and slow.max() <= 1.0 + 1e-9
    assert slow[-1] > 0.95 and fast[-1] > 0.99
    # One sample after the step, a first-order low-pass at 1 Hz moves alpha of the way.
    assert slow[10] == pytest.approx(smoothing_factor(1 / FPS, 1.0))
    # The speed term raises the cut-off: less lag 5 frames after the step.
    assert fast[15] > slow[15] + 0.2


def test_noise_is_reduced_at_rest():
    rng = np.random.default_rng(0)
    noisy = 0.5 + rng.normal(0, 0.05, size=(300, 4))
    out = _run(OneEuroFilter(min_cutoff_hz=1.0, beta=0.0), noisy)
    assert out[30:].std(axis=0).max() < 0.35 * noisy[30:].std(axis=0).min()
    np.testing.assert_allclose(out[30:].mean(axis=0), 0.5, atol=0.02)


def test_channels_are_independent_and_parameters_broadcast():
    f = OneEuroFilter(min_cutoff_hz=np.array([0.5, 5.0]), beta=0.0)
    f(np.zeros(2), 0.0)
    y = f(np.ones(2), 1 / FPS)
    assert y[1] > y[0] > 0  # higher cut-off = less smoothing
    assert y[0] == pytest.approx(smoothing_factor(1 / FPS, 0.5))


def test_contract_errors_and_reset():
    f = OneEuroFilter()
    f(np.zeros(3), 1.0)
    with pytest.raises(TrackingError, match=r"1\.0 s after 1\.0 s"):
        f(np.zeros(3), 1.0)
    with pytest.raises(TrackingError, match="strictly increase"):
        f(np.zeros(3), 0.5)
    with pytest.raises(InputError, match="shape changed"):
        f(np.zeros(4), 2.0)
    with pytest.raises(InputError, match="NaN"):
        f(np.array([0.0, np.nan, 0.0]), 2.0)
    f.reset()
    np.testing.assert_array_equal(f(np.full(4, 7.0), 0.0), np.full(4, 7.0))
    with pytest.raises(InputError):
        OneEuroFilter(min_cutoff_hz=0.0)
    with pytest.raises(InputError):
        OneEuroFilter(beta=-1.0)


def _one_euro_reference(min_cutoff, beta, d_cutoff=1.0):
    """The filter as it was written before its in-place rewrite: the paper's equations line by line."""
    state = {}

    def step(x, t):
        xv = np.asarray(x, dtype=np.float64)
        if not state:
            state.update(x=xv.copy(), dx=np.zeros_like(xv), t=t)
            return xv.copy()
        t_e = t - state["t"]
        dx = (xv - state["x"]) / t_e
        dx_hat = state["dx"] + smoothing_factor(t_e, d_cutoff) * (dx - state["dx"])
        cutoff = np.asarray(min_cutoff) + np.asarray(beta) * np.abs(dx_hat)
        x_hat = state["x"] + smoothing_factor(t_e, cutoff) * (xv - state["x"])
        state.update(x=x_hat, dx=dx_hat, t=t)
        return x_hat.copy()

    return step


@pytest.mark.parametrize("shape, min_cutoff, beta", [
    ((3, 3), 1.5, 0.3), ((20,), 3.0, 0.5), ((2,), [1.0, 2.0], [0.1, 0.9]), ((), 1.5, 0.2), ((5,), 0.3, 0.0)])
def test_one_euro_is_bit_identical_to_the_paper_equations(shape, min_cutoff, beta):
    """The in-place rewrite gives the same bits as the plain equations (values, dtype, shape), for
    scalar and per-element parameters and a 0-d sample, over irregular intervals."""
    rng = np.random.default_rng(3)
    ref, f = _one_euro_reference(min_cutoff, beta), OneEuroFilter(min_cutoff_hz=min_cutoff, beta=beta)
    t = 0.0
    for _ in range(300):
        t += float(rng.uniform(0.001, 0.1))
        x = rng.normal(size=shape) * rng.uniform(0.0, 3.0)
        a, b = ref(x, t), f(x, t)
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert f.value is not None and np.array_equal(f.value, a)
