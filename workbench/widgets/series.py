"""An append-only (x, y) series kept at bounded size by merging neighbouring points, for live plots.

Memory and the cost of `DownsampledSeries.points` depend on ``max_points`` only, never on how many points
were appended, so a loss curve of 10^6 steps costs the same to draw as one of 1,000.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from workbench._validate import check_int


class DownsampledSeries:
    """Keeps at most `max_points` buckets, each the mean (x, y) of consecutive appended points.

    Until `max_points` points have been appended every point is its own bucket, so `points` gives them
    back unchanged. After that, when the buckets are full, neighbouring pairs merge and the bucket width
    doubles: `append` is O(1) amortised and `points` returns between ``max_points // 2`` and `max_points`
    points. A bucket stores its point count and the sums of x and y, so the count-weighted mean of the
    returned y equals the mean of all appended y.

    Points whose x or y is not finite (a NaN loss, say) are dropped and counted in `dropped` (the first one's
    x in `first_dropped_x`); ``len()``
    counts the points kept. Not thread-safe: guard concurrent `append` and `points` with a lock.

    Args:
        max_points: the most points `points` returns (≥ 2).

    Example:
        >>> series = DownsampledSeries(max_points=4)
        >>> series.extend(range(8), [1.0, 3.0] * 4)
        >>> x, y = series.points()
        >>> x.tolist(), y.tolist(), len(series)
        ([0.5, 2.5, 4.5, 6.5], [2.0, 2.0, 2.0, 2.0], 8)
    """

    def __init__(self, max_points: int = 1000) -> None:
        self.max_points = check_int("max_points", max_points, minimum=2)
        self._count = np.zeros(max_points, dtype=np.int64)  # closed buckets: points in each
        self._x_sum = np.zeros(max_points)  # closed buckets: sum of x
        self._y_sum = np.zeros(max_points)  # closed buckets: sum of y
        self._closed = 0  # closed buckets in use
        self._width = 1  # points per closed bucket
        self._open_count = 0  # the bucket being filled, as Python numbers (cheap to add to)
        self._open_x = 0.0
        self._open_y = 0.0
        self._length = 0
        self.dropped = 0
        self.first_dropped_x: float | None = None

    def __len__(self) -> int:
        return self._length

    @property
    def width(self) -> int:
        """How many appended points one bucket holds now (1 until `max_points` were appended)."""
        return self._width

    def append(self, x: float, y: float) -> None:
        """Add one point (dropped if x or y is not finite)."""
        x, y = float(x), float(y)
        if not (math.isfinite(x) and math.isfinite(y)):
            self.dropped += 1
            self.first_dropped_x = x if self.first_dropped_x is None else self.first_dropped_x
            return
        if self._open_count == 0 and self._closed == self.max_points:
            self._merge()
        self._open_count += 1
        self._open_x += x
        self._open_y += y
        self._length += 1
        if self._open_count == self._width:
            self._close_open_bucket()

    def extend(self, xs: Iterable[float], ys: Iterable[float]) -> None:
        """Add many points at once (vectorised; same result as appending them one by one, up to rounding)."""
        x = np.asarray(xs if hasattr(xs, "__len__") else list(xs), dtype=np.float64).ravel()
        y = np.asarray(ys if hasattr(ys, "__len__") else list(ys), dtype=np.float64).ravel()
        if x.shape != y.shape:
            raise ValueError(f"xs and ys must have the same length, got {x.size} and {y.size}")
        keep = np.isfinite(x) & np.isfinite(y)
        self.dropped += int(x.size - np.count_nonzero(keep))
        if self.first_dropped_x is None and not keep.all():
            self.first_dropped_x = float(x[~keep][0])
        x, y = x[keep], y[keep]
        i = 0
        while i < x.size:
            if self._open_count == 0 and self._closed == self.max_points:
                self._merge()
            left = x.size - i
            if self._open_count > 0 or left < self._width:
                take = min(self._width - self._open_count, left)
                self._open_count += take
                self._open_x += float(x[i : i + take].sum())
                self._open_y += float(y[i : i + take].sum())
                if self._open_count == self._width:
                    self._close_open_bucket()
            else:  # whole buckets straight from the input: (k, width) blocks summed along rows
                k = min(self.max_points - self._closed, left // self._width)
                take = k * self._width
                rows = slice(self._closed, self._closed + k)
                self._count[rows] = self._width
                self._x_sum[rows] = x[i : i + take].reshape(k, self._width).sum(axis=1)
                self._y_sum[rows] = y[i : i + take].reshape(k, self._width).sum(axis=1)
                self._closed += k
            i += take
            self._length += take

    def drop_after(self, x: float) -> None:
        """Forget the points appended past `x` (a run resumed from step `x` redoes the steps after it): the
        buckets whose mean x is past it, in append order from the first such one; a bucket that straddles
        `x` keeps its mean (until `max_points` points are appended, every bucket is one point: exact).

        Example:
            >>> series = DownsampledSeries()
            >>> series.extend([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
            >>> series.drop_after(2)
            >>> series.append(3, 30.0)
            >>> series.points()[1].tolist(), len(series)
            ([1.0, 2.0, 30.0], 3)
        """
        means = self._x_sum[: self._closed] / np.maximum(self._count[: self._closed], 1)
        past = np.flatnonzero(means > x)
        if past.size:
            first = int(past[0])
            self._length -= int(self._count[first : self._closed].sum()) + self._open_count
            self._closed, self._open_count, self._open_x, self._open_y = first, 0, 0.0, 0.0
        elif self._open_count and self._open_x / self._open_count > x:
            self._length -= self._open_count
            self._open_count, self._open_x, self._open_y = 0, 0.0, 0.0

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """The bucket means as new arrays ``(x, y)``: at most `max_points` of them, in append order."""
        n = self._closed
        count = self._count[:n]
        x, y = self._x_sum[:n] / count, self._y_sum[:n] / count
        if self._open_count:
            x = np.append(x, self._open_x / self._open_count)
            y = np.append(y, self._open_y / self._open_count)
        return x, y

    def counts(self) -> np.ndarray:
        """How many appended points each of the `points` summarises (they add up to ``len()``)."""
        counts = self._count[: self._closed].copy()
        return np.append(counts, self._open_count) if self._open_count else counts

    def _close_open_bucket(self) -> None:
        n = self._closed
        self._count[n], self._x_sum[n], self._y_sum[n] = self._open_count, self._open_x, self._open_y
        self._closed = n + 1
        self._open_count, self._open_x, self._open_y = 0, 0.0, 0.0

    def _merge(self) -> None:
        """Halve the closed buckets by summing neighbouring pairs; an odd last one reopens, half full."""
        n, pairs = self._closed, self._closed // 2
        for array in (self._count, self._x_sum, self._y_sum):
            array[:pairs] = array[: 2 * pairs].reshape(pairs, 2).sum(axis=1)  # (pairs, 2) -> (pairs,)
        if n % 2:
            self._open_count = int(self._count[n - 1])
            self._open_x, self._open_y = float(self._x_sum[n - 1]), float(self._y_sum[n - 1])
        self._closed = pairs
        self._width *= 2
