"""`ema`: the exponential moving average the loss curves are drawn through (the live plots, the runs browser)
and the learning-rate range test judges, with TensorBoard's debiasing. Below every layer: the plots
(widgets) and the range test (train) share it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def ema(values: Iterable[float], smoothing: float) -> np.ndarray:
    """Exponential moving average with TensorBoard's debiasing: ``s_i = w·s_{i-1} + (1-w)·y_i``, divided by
    ``1 - w^(i+1)`` so the first points are not pulled toward zero. `smoothing` is w in [0, 1); 0 returns
    the values unchanged.

    Example:
        >>> ema([1.0, 1.0, 1.0], 0.9).tolist()  # a constant stays constant (the debiasing)
        [1.0, 1.0, 1.0]
        >>> ema([0.0, 10.0], 0.5).tolist()
        [0.0, 6.666666666666667]
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1) (0: raw values, 0.9: heavy), got {smoothing!r}")
    y = np.asarray(values if hasattr(values, "__len__") else list(values), dtype=np.float64)
    if smoothing == 0.0 or y.size == 0:
        return y.copy()
    out = np.empty_like(y)
    last, weight = 0.0, 1.0
    for i, value in enumerate(y.tolist()):  # ≤ max_points values per draw: a plain loop is microseconds
        last = smoothing * last + (1.0 - smoothing) * value
        weight *= smoothing
        out[i] = last / (1.0 - weight)
    return out
