import math

import numpy as np
import pytest

from workbench._smoothing import ema
from workbench.widgets.series import DownsampledSeries


def _filled(n, max_points=1000, seed=0):
    rng = np.random.default_rng(seed)
    xs, ys = np.arange(n) * 0.5 + 3, rng.normal(size=n)
    series = DownsampledSeries(max_points)
    for x, y in zip(xs, ys, strict=True):
        series.append(x, y)
    return series, xs, ys


@pytest.mark.parametrize("n", [0, 1, 2, 999, 1000])
def test_up_to_max_points_the_points_come_back_unchanged(n):
    series, xs, ys = _filled(n)
    x, y = series.points()
    assert len(series) == n
    assert x.tolist() == xs.tolist() and y.tolist() == ys.tolist()  # identical values, not close ones
    assert series.counts().tolist() == [1] * n


@pytest.mark.parametrize("max_points", [2, 3, 7, 1000])
def test_a_million_appends_stay_within_max_points_and_keep_the_mean(max_points):
    n = 10**6
    series = DownsampledSeries(max_points)
    ys = np.sin(np.arange(n) / 1000.0) + np.arange(n) * 1e-6
    series.extend(np.arange(n), ys)
    x, y = series.points()
    counts = series.counts()
    assert len(series) == n == counts.sum()
    assert max_points // 2 <= len(x) == len(y) == len(counts) <= max_points
    assert abs(np.sum(counts * y) / n - ys.mean()) < 1e-9
    assert np.all(np.diff(x) > 0)


def test_append_one_by_one_is_bounded_and_mean_preserving():
    series, xs, ys = _filled(10**6, max_points=1000)
    x, y = series.points()
    assert 500 <= len(x) <= 1000
    assert abs(np.sum(series.counts() * y) / len(series) - ys.mean()) < 1e-9
    assert np.all(np.diff(x) > 0)
    assert x[0] >= xs[0] and x[-1] <= xs[-1]


def test_points_cost_depends_on_max_points_not_history():
    short, _, _ = _filled(100, max_points=200)
    long = DownsampledSeries(200)
    long.extend(np.arange(10**6), np.ones(10**6))
    assert len(short.points()[0]) == 100
    assert len(long.points()[0]) <= 200
    assert long._x_sum.size == short._x_sum.size == 200  # storage is fixed at construction


@pytest.mark.parametrize("chunk", [1, 3, 64, 1000, 5000])
def test_extend_matches_appending_one_by_one(chunk):
    n = 5000
    one, xs, ys = _filled(n, max_points=100)
    many = DownsampledSeries(100)
    for start in range(0, n, chunk):
        many.extend(xs[start : start + chunk], ys[start : start + chunk])
    for a, b in zip(one.points(), many.points(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert one.counts().tolist() == many.counts().tolist()
    assert len(one) == len(many) == n


def test_extend_takes_iterables_and_json_strings():
    series = DownsampledSeries(10)
    series.extend((i for i in range(3)), iter([1.0, "nan", "2.5"]))
    x, y = series.points()
    assert x.tolist() == [0.0, 2.0] and y.tolist() == [1.0, 2.5]


def test_non_finite_points_are_dropped_without_touching_neighbours():
    series = DownsampledSeries(4)
    for x, y in [(0, 1.0), (1, math.nan), (2, 3.0), (math.inf, 1.0), (3, -math.inf), (4, 5.0)]:
        series.append(x, y)
    series.extend([5, 6], [math.nan, 7.0])
    x, y = series.points()
    assert x.tolist() == [0.0, 2.0, 4.0, 6.0] and y.tolist() == [1.0, 3.0, 5.0, 7.0]
    assert len(series) == 4 and series.dropped == 4


def test_buckets_double_in_width_when_full():
    series = DownsampledSeries(4)
    series.extend(range(4), range(4))
    assert series.width == 1
    series.append(4, 4)
    assert series.width == 2
    assert series.points()[0].tolist() == [0.5, 2.5, 4.0] and series.counts().tolist() == [2, 2, 1]


def test_extend_rejects_unequal_lengths():
    with pytest.raises(ValueError, match="same length"):
        DownsampledSeries().extend([1, 2], [1.0])


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, True, "10"])
def test_max_points_must_be_an_integer_of_at_least_two(bad):
    with pytest.raises(ValueError, match="max_points"):
        DownsampledSeries(bad)


def test_ema_matches_the_recurrence_with_debiasing():
    values = [3.0, 1.0, 4.0, 1.0, 5.0]
    w, last, expected = 0.7, 0.0, []
    for i, y in enumerate(values, start=1):
        last = w * last + (1 - w) * y
        expected.append(last / (1 - w**i))
    assert ema(values, w).tolist() == pytest.approx(expected)
    assert ema(values, 0.0).tolist() == values
    assert ema([], 0.5).size == 0
    with pytest.raises(ValueError, match="smoothing must be in"):
        ema(values, -0.1)


@pytest.mark.parametrize("limit", [0, 1, 250, 777, 999, 1000])
def test_drop_after_forgets_the_buckets_past_a_step_and_appends_go_on_from_it(limit):
    """A resume from step `limit` of a 1000-step curve held in 64 buckets of ~16 steps."""
    series = DownsampledSeries(max_points=64)
    series.extend(np.arange(1, 1001), np.ones(1000))
    series.drop_after(limit)
    x, _ = series.points()
    assert (x <= limit).all() and int(series.counts().sum()) == len(series)
    assert len(series) >= limit - series.width  # at most the bucket that straddles the step goes
    series.extend(np.arange(limit + 1, 1001), np.full(1000 - limit, 2.0))
    x, _ = series.points()
    assert (np.diff(x) > 0).all() and len(series) <= 1000 + series.width
