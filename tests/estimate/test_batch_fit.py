"""`largest_batch_size`: the batch it answers fits (its estimate raised by its uncertainty) and one more does
not, by the rules (a closed form), on a traced transformer, with activation checkpointing; what fits nothing,
the search's ceiling and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import models
from workbench.estimate import estimate_memory, largest_batch_size
from workbench.estimate.batch_fit import MAXIMUM
from workbench.estimate.memory import ANALYTIC_UNCERTAINTY


def _with_headroom(estimate) -> float:
    return estimate.total * (1 + estimate.uncertainty)


def test_by_the_rules_the_answer_is_the_closed_form():
    """A parameter count with fixed activation bytes per sample: memory is params + grads + Adam's two moments
    (16 bytes a parameter) + bytes per sample × batch, exactly linear."""
    memory = 100 * 2**20
    fit = largest_batch_size(1_000_000, activation_bytes_per_sample=12_345, memory_bytes=memory)
    expected = math.floor((memory / (1 + ANALYTIC_UNCERTAINTY) - 16_000_000) / 12_345)
    assert fit.batch_size == expected
    assert fit.estimate.total == 16_000_000 + 12_345 * expected
    assert fit.describe().startswith(f"batch {expected:,} per device: ")


def test_a_traced_transformer_s_answer_fits_one_more_sample_does_not_and_recomputing_fits_more():
    torch.manual_seed(0)
    lm = models.transformer_lm(65, 32, d_model=32, n_heads=2, n_layers=2)
    sample = torch.zeros(1, 32, dtype=torch.long)
    options = {"sample": sample, "target": sample, "loss_fn": models.next_token_loss, "optimizer": "adamw"}
    recomputing = {**options, "activation_checkpointing": "blocks"}
    fit = largest_batch_size(lm, memory_bytes=32 * 2**20, **recomputing)
    assert fit.estimate.basis.startswith("traced (checked")  # the answer with the real steps' check
    assert _with_headroom(fit.estimate) <= 32 * 2**20
    assert _with_headroom(estimate_memory(lm, batch_size=fit.batch_size + 1, **recomputing)) > 32 * 2**20
    assert fit.estimates <= 10, fit.estimates  # a line, a second one, a few steps: not a scan
    kept = largest_batch_size(lm, memory_bytes=32 * 2**20, method="traced", **options)
    assert fit.batch_size > 1.3 * kept.batch_size, (kept.batch_size, fit.batch_size)


def test_what_fits_nothing_and_what_fits_everything_say_so():
    nothing = largest_batch_size(10_000_000, activation_bytes_per_sample=1, memory_bytes=2**20)
    assert nothing.batch_size == 0 and nothing.describe().startswith("not even a batch of 1 fits: ")
    everything = largest_batch_size(10, activation_bytes_per_sample=1, memory_bytes=80 * 2**30)
    assert everything.batch_size == MAXIMUM and "(the search's ceiling)" in everything.describe()


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="memory_bytes must be an integer ≥ 1, got 0"):
        largest_batch_size(1000, activation_bytes_per_sample=1, memory_bytes=0)
    with pytest.raises(ValueError, match="largest_batch_size finds batch_size: leave it out"):
        largest_batch_size(1000, activation_bytes_per_sample=1, memory_bytes=2**20, batch_size=8)
    with pytest.raises(ValueError, match="precision='fp8' is not supported"):
        largest_batch_size(1000, activation_bytes_per_sample=1, memory_bytes=2**20, precision="fp8")
