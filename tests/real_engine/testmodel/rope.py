"""Query weights for heads that attend a fixed number of tokens back through RoPE alone.

Query and key are constant vectors (read from a constant dimension of the residual stream), so a head's
score for a key ``delta`` tokens back is, over the rotary pairs ``i`` of frequency ``theta_i``,
``f(delta) = sum_i A_i cos(theta_i delta) - B_i sin(theta_i delta)`` (the key of each pair is ``(1, 0)``).
A linear program (scipy's HiGHS, deterministic) picks ``A`` and ``B`` in [-1, 1] that maximise the margin
by which ``f(back)`` beats every other offset up to ``horizon``: the head then attends ``back`` tokens back,
and nowhere else, at any position of the context. So that the model shows whether its RoPE base was changed
(an override applied, or only reported), the same program also demands that under another base
(``detuned``) the offset ``lure`` beats ``back`` by as much: such a model no longer finds the previous tokens
once ``lure`` tokens of context exist, and recalls nothing.
"""

from __future__ import annotations

import numpy as np


def frequencies(theta: float, rotary_dim: int) -> np.ndarray:
    """The rotary pairs' angular frequencies, as sglang and transformers compute them."""
    return 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def score(coeffs: np.ndarray, freqs: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``f(delta)`` for the coefficients ``[A..., B...]``."""
    angles = np.outer(deltas, freqs)
    half = len(freqs)
    return np.cos(angles) @ coeffs[:half] - np.sin(angles) @ coeffs[half:]


def _features(deltas: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    angles = np.outer(deltas, freqs)
    return np.concatenate([np.cos(angles), -np.sin(angles)], axis=1)


def solve(back: int, theta: float, rotary_dim: int, horizon: int, detuned: float | None = None,
          lure: int = 0) -> tuple[np.ndarray, float]:
    """(``[A..., B...]``, margin) of the head attending ``back`` tokens back over offsets 0..``horizon``
    (and, with ``detuned``, attending ``lure`` back instead under that base)."""
    from scipy.optimize import linprog

    freqs = frequencies(theta, rotary_dim)
    others = np.array([d for d in range(horizon + 1) if d != back])
    gap = _features(np.array([back]), freqs) - _features(others, freqs)  # f(back) - f(other), per coefficient
    if detuned is not None:
        wrong = frequencies(detuned, rotary_dim)
        gap = np.r_[gap, _features(np.array([lure]), wrong) - _features(np.array([back]), wrong)]
    n = 2 * len(freqs)
    # Maximise m subject to gap @ x >= m for every row.
    result = linprog(np.r_[np.zeros(n), -1.0], A_ub=np.c_[-gap, np.ones(len(gap))], b_ub=np.zeros(len(gap)),
                     bounds=[(-1.0, 1.0)] * n + [(None, None)], method="highs")
    if not result.success:
        raise RuntimeError(f"no RoPE weights for a head {back} back: {result.message}")
    return result.x[:n], float(result.x[n])


def attended(coeffs: np.ndarray, theta: float, rotary_dim: int, horizon: int) -> int:
    """The offset the head attends to most under the RoPE base ``theta`` (over 0..``horizon``)."""
    return int(np.argmax(score(coeffs, frequencies(theta, rotary_dim), np.arange(horizon + 1))))
