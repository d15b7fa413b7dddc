"""Evaluating a model on one rank's shard of a split: mean loss (and accuracy), reduced over the ranks."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from workbench.data import Dataset, ShardedLoader
from workbench.train.precision import Precision
from workbench.train.strategy import Batch, LossFn, Strategy


def evaluate_shard(
    model: torch.nn.Module,
    batches: Sequence[Batch] | ShardedLoader,
    split: Dataset,
    strategy: Strategy,
    loss_fn: LossFn,
    precision: Precision,
    classification: bool,
) -> dict[str, float]:
    """Mean loss (and accuracy for classification) over every rank's `batches` of `split`.

    Every rank calls it with its own shard of `split` (`batches`). Where every rank must join every
    forward (FSDP), a rank out of batches repeats one sample of `split`, uncounted. Returns ``{}`` when no
    rank counted a sample.
    """
    model.eval()
    # loss sum, correct predictions, samples, predictions: summed over this rank's shard, then over
    # the ranks whose results count (one per shard of the data)
    totals = torch.zeros(4, dtype=torch.float64, device=strategy.device)
    passes = strategy.eval_forward_passes(len(batches))
    extra = itertools.repeat((split.features[:1], split.targets[:1], False), passes - len(batches))
    with torch.no_grad():
        for x, y, counted in itertools.chain(((x, y, True) for x, y in batches), extra):
            x, y = x.to(strategy.device, non_blocking=True), y.to(strategy.device, non_blocking=True)
            with precision.autocast():
                output = strategy.predict(model, x)
                if output is None or not counted or not strategy.reports_loss:
                    continue
                loss = loss_fn(output, y)
            totals[0] += loss.double() * len(x)
            if classification:  # per sample, or per token (outputs (B, T, classes), targets (B, T))
                totals[1] += (output.argmax(dim=-1) == y).sum()
                totals[3] += y.numel()
            totals[2] += len(x)
    loss_sum, correct, count, predictions = strategy.all_reduce(totals).tolist()
    if count == 0:
        return {}
    metrics = {"loss": loss_sum / count}
    if classification:
        metrics["accuracy"] = correct / predictions
    return metrics
