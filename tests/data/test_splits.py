import pytest
import torch

from workbench.data import load_dataset, split_dataset, split_indices


@pytest.mark.parametrize("n", [1, 10, 1797, 1001])
def test_splits_are_disjoint_and_cover_everything_when_fractions_sum_to_one(n):
    train, val, test = split_indices(n, (0.7, 0.2, 0.1), seed=1)
    joined = torch.cat([train, val, test])
    assert sorted(joined.tolist()) == list(range(n))
    assert len(val) == int(0.2 * n) and len(test) == int(0.1 * n)


def test_fractions_below_one_leave_the_rest_out():
    train, val, test = split_indices(1000, (0.5, 0.1, 0.1), seed=0)
    assert (len(train), len(val), len(test)) == (500, 100, 100)
    assert len(set(torch.cat([train, val, test]).tolist())) == 700


def test_same_seed_same_split_other_seed_other_split():
    a = split_indices(500, seed=4)
    b = split_indices(500, seed=4)
    c = split_indices(500, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_split_dataset_returns_datasets_of_the_right_sizes():
    splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    assert splits.sizes() == {"train": 1439, "val": 179, "test": 179}
    assert splits.train.num_classes == 10


@pytest.mark.parametrize(
    "fractions", [(0.8, 0.3, 0.1), (0.9, -0.1, 0.2), (0.8, 0.2), (0.5, 0.2, 0.1, 0.1), ("a", 0, 0), 0.8]
)
def test_bad_fractions_name_the_field_and_the_rule(fractions):
    with pytest.raises(ValueError, match=r"fractions must be .*summing to at most 1"):
        split_indices(100, fractions)
