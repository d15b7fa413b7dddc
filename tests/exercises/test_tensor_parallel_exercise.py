"""Notebook 04b's "split the MLP yourself" check: the right answer passes, each classic slip is named."""

import pytest
import torch
from torch.nn import functional

from workbench.exercises import ExerciseMismatch, check_tensor_parallel_mlp


def partials(x, w1_shards, b1_shards, w2_shards):  # each rank's full-size partial output
    ranks = zip(w1_shards, b1_shards, w2_shards, strict=True)
    return [functional.gelu(x @ w1.T + b1) @ w2.T for w1, b1, w2 in ranks]


def tp_mlp(x, w1_shards, b1_shards, w2_shards, b2):
    return sum(partials(x, w1_shards, b1_shards, w2_shards)) + b2


def bias_on_every_rank(x, w1_shards, b1_shards, w2_shards, b2):
    return sum(p + b2 for p in partials(x, w1_shards, b1_shards, w2_shards))


def averaged(x, w1_shards, b1_shards, w2_shards, b2):
    return torch.stack(partials(x, w1_shards, b1_shards, w2_shards)).mean(0) + b2


def gelu_after_the_sum(x, w1_shards, b1_shards, w2_shards, b2):
    ranks = zip(w1_shards, b1_shards, w2_shards, strict=True)
    return functional.gelu(sum((x @ w1.T + b1) @ w2.T for w1, b1, w2 in ranks)) + b2


def hidden_only(x, w1_shards, b1_shards, w2_shards, b2):  # the hidden slices, no second layer
    return torch.cat([functional.gelu(x @ w1.T + b1) for w1, b1 in zip(w1_shards, b1_shards, strict=True)], 1)


def test_the_reference_answer_passes():
    assert check_tensor_parallel_mlp(tp_mlp).startswith("tp_mlp matches the unsplit MLP on 1, 2 and 4 ranks")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (bias_on_every_rank, "on 2 ranks: b2 added on every rank"),
        (averaged, "on 2 ranks: the partials averaged instead of summed"),
        (gelu_after_the_sum, "on 1 rank: GeLU after the all-reduce"),
        (hidden_only, r"returned \(5, 16\) on 1 rank; the MLP's output is \(5, 4\)"),
    ],
)
def test_each_slip_is_named(answer, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check_tensor_parallel_mlp(answer)
