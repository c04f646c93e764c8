"""One Euro filter, vectorised over arrays.

G. Casiez, N. Roussel, D. Vogel, "1 Euro Filter: A Simple Speed-based Low-pass
Filter for Noisy Input in Interactive Systems", Proc. CHI 2012, pp. 2527-2530,
doi:10.1145/2207676.2208639.

An exponential low-pass filter whose cut-off frequency rises with the speed of
the signal: ``fc = min_cutoff + beta * |dx/dt|`` (the derivative itself
low-passed at ``d_cutoff``). Slow movements are smoothed strongly (little
jitter), fast ones pass with little lag. The smoothing factor for a sample
interval ``T_e`` is ``alpha = 1 / (1 + tau / T_e)`` with ``tau = 1 / (2 pi fc)``
(the paper's equations, section 3).
"""
from __future__ import annotations

import math

import numpy as np

from avatar_app.core.arrays import all_finite
from avatar_app.core.errors import InputError, TrackingError


def smoothing_factor(t_e_s: float | np.ndarray, cutoff_hz: float | np.ndarray) -> np.ndarray:
    """Exponential smoothing factor of the One Euro filter.

    Args:
        t_e_s: sampling period, seconds (> 0).
        cutoff_hz: cut-off frequency, Hz (> 0); scalar or array.

    Returns:
        ``alpha = 1 / (1 + 1 / (2 pi fc T_e))`` (float64, broadcast shape), in (0, 1).
    """
    tau = 1.0 / (2.0 * math.pi * np.asarray(cutoff_hz, dtype=np.float64))
    return 1.0 / (1.0 + tau / t_e_s)


class OneEuroFilter:
    """One Euro filter over a fixed-shape array of independent channels.

    Each element of the input array is filtered independently with the same
    parameters (or per-element parameters, if arrays are given that broadcast
    to the input's shape).

    Args:
        min_cutoff_hz: minimum cut-off frequency, Hz (> 0): lower = less jitter
            at rest, more lag. Paper's suggestion: start at ~1 Hz.
        beta: speed coefficient, seconds per unit of the signal (>= 0): higher =
            less lag when moving fast.
        d_cutoff_hz: cut-off frequency for the derivative, Hz (> 0); the paper uses 1 Hz.

    Raises:
        InputError: a parameter out of range.
    """

    def __init__(
        self,
        min_cutoff_hz: float | np.ndarray = 1.0,
        beta: float | np.ndarray = 0.0,
        d_cutoff_hz: float | np.ndarray = 1.0,
    ) -> None:
        self.min_cutoff_hz = np.asarray(min_cutoff_hz, dtype=np.float64)
        self.beta = np.asarray(beta, dtype=np.float64)
        self.d_cutoff_hz = np.asarray(d_cutoff_hz, dtype=np.float64)
        if np.any(self.min_cutoff_hz <= 0) or np.any(self.d_cutoff_hz <= 0):
            raise InputError("One Euro filter cut-off frequencies must be positive (Hz)")
        if np.any(self.beta < 0):
            raise InputError("One Euro filter beta must be non-negative")
        self._x: np.ndarray | None = None
        self._dx: np.ndarray | None = None
        self._t_s: float | None = None
        # smoothing_factor's tau for the fixed derivative cut-off, computed once (the same operations)
        self._tau_d = 1.0 / (2.0 * math.pi * self.d_cutoff_hz)
        if self._tau_d.ndim == 0:
            self._tau_d = float(self._tau_d)
        self._scalar_params = self.min_cutoff_hz.ndim == 0 and self.beta.ndim == 0

    def reset(self) -> None:
        """Forget the state; the next sample passes through unchanged."""
        self._x = None
        self._dx = None
        self._t_s = None

    @property
    def value(self) -> np.ndarray | None:
        """The last filtered value (float64 array), or None before the first sample."""
        return None if self._x is None else self._x.copy()

    def _checked(self, x: np.ndarray | float, t_s: float) -> tuple[np.ndarray, float]:
        """The sample as a float64 array and its time as a float, checked (see :meth:`__call__`'s Raises)."""
        xv = np.asarray(x, dtype=np.float64)
        t = float(t_s)
        if not math.isfinite(t):
            raise InputError(f"One Euro filter time must be finite, got {t_s}")
        if not all_finite(xv):
            raise InputError("One Euro filter input contains NaN or infinite values")
        if self._x is not None:
            if xv.shape != self._x.shape:
                raise InputError(
                    f"One Euro filter input shape changed from {self._x.shape} to {xv.shape}; "
                    "call reset() first"
                )
            if not t > self._t_s:
                raise TrackingError(
                    f"One Euro filter timestamps must strictly increase: got {t} s after {self._t_s} s"
                )
        return xv, t

    def __call__(self, x: np.ndarray | float, t_s: float) -> np.ndarray:
        """Filter one sample.

        Args:
            x: the sample: any shape, fixed across calls; float values in any unit.
            t_s: its time in seconds; must be larger than the previous call's.

        Returns:
            The filtered sample, float64, same shape as ``x`` (a new array).

        Raises:
            InputError: the shape changed or a value/time is not finite.
            TrackingError: ``t_s`` does not increase.

        The paper's equations, as :func:`smoothing_factor` computes them, with the
        derivative's ``tau`` computed once and the temporaries reused (the same
        floating-point operations in the same order: bit-identical results).
        """
        xv, t = self._checked(x, t_s)
        x_prev = self._x
        if x_prev is None:
            self._x = xv.copy()
            self._dx = np.zeros_like(xv)
            self._t_s = t
            return xv.copy()
        t_e = t - self._t_s
        diff = xv - x_prev
        if not isinstance(diff, np.ndarray):  # a 0-d sample: numpy scalars, no in-place operations
            dx_hat = self._dx + smoothing_factor(t_e, self.d_cutoff_hz) * (diff / t_e - self._dx)
            cutoff = self.min_cutoff_hz + self.beta * np.abs(dx_hat)
            x_hat = np.asarray(x_prev + smoothing_factor(t_e, cutoff) * diff)
            self._x, self._dx, self._t_s = x_hat, np.asarray(dx_hat), t
            return x_hat.copy()
        if self._scalar_params:
            x_hat, dx_hat = one_euro_step(diff, x_prev, self._dx, t_e, self._tau_d, self.beta, self.min_cutoff_hz)
            self._x, self._dx, self._t_s = x_hat, dx_hat, t
            return x_hat.copy()
        dx_prev = self._dx
        dx_hat = diff / t_e  # dx
        dx_hat -= dx_prev
        dx_hat *= 1.0 / (1.0 + self._tau_d / t_e)  # smoothing_factor(t_e, d_cutoff_hz)
        dx_hat += dx_prev
        cutoff = self.min_cutoff_hz + self.beta * np.abs(dx_hat)
        x_hat = x_prev + smoothing_factor(t_e, cutoff) * diff
        self._x, self._dx, self._t_s = x_hat, dx_hat, t
        return x_hat.copy()


def one_euro_step(diff: np.ndarray, x_prev: np.ndarray, dx_prev: np.ndarray, t_e: float | np.ndarray,
                  tau_d: float, beta: float | np.ndarray, min_cutoff_hz: float | np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One step of the One Euro filter on independent channels, the paper's equations elementwise.

    The arithmetic of :class:`OneEuroFilter` (``smoothing_factor`` for the derivative and for
    the signal), with the temporaries reused: every element goes through the same IEEE
    operations in the same order whatever the array's length, so filters of several signals
    stacked into one array give bit-identical results to one filter per signal.

    Args:
        diff: (N,) float64 ``x - x_prev``; overwritten (it becomes the filtered sample).
        x_prev: (N,) float64 previous filtered value.
        dx_prev: (N,) float64 previous filtered derivative (units per second).
        t_e: seconds since the previous sample (> 0): a float, or (N,) float64 per channel.
        tau_d: ``1 / (2 pi d_cutoff_hz)``, seconds (the derivative's time constant).
        beta: speed coefficient, a float or (N,) float64 per channel.
        min_cutoff_hz: minimum cut-off, Hz, a float or (N,) float64 per channel.

    Returns:
        ``(x_hat, dx_hat)``: (N,) float64 filtered sample (``diff``'s buffer) and derivative (new).
    """
    dx_hat = diff / t_e  # dx
    dx_hat -= dx_prev
    dx_hat *= 1.0 / (1.0 + tau_d / t_e)  # smoothing_factor(t_e, d_cutoff_hz)
    dx_hat += dx_prev
    cutoff = np.abs(dx_hat)
    cutoff *= beta
    cutoff += min_cutoff_hz
    # smoothing_factor(t_e, cutoff) = 1 / (1 + (1 / (2 pi cutoff)) / t_e), in place
    cutoff *= 2.0 * math.pi
    np.divide(1.0, cutoff, out=cutoff)
    cutoff /= t_e
    cutoff += 1.0
    np.divide(1.0, cutoff, out=cutoff)
    diff *= cutoff
    diff += x_prev  # x_hat
    return diff, dx_hat
