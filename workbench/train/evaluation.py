"""Evaluating a model on one rank's shard of a split: mean loss and the metrics, exact over the ranks.

Every rank sums its shard (loss × samples, samples, each metric's sums); the sums are combined over the
ranks and only then divided, so a rank with fewer samples weighs less (no average of averages).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from workbench.train.batches import workers_ended_on_error
from workbench.train.metrics import MetricError
from workbench.train.objective import Objective
from workbench.train.precision import Precision
from workbench.train.strategy import Strategy


def evaluate_shard(
    model: torch.nn.Module,
    loader: Any,
    strategy: Strategy,
    objective: Objective,
    precision: Precision,
) -> dict[str, float]:
    """Mean loss and metrics over every rank's `loader` (its shard of one split).

    Where every rank must join every forward (FSDP), a rank out of batches repeats a one-sample batch
    (`loader.sample_batch()`), uncounted. A shard of unknown length (an iterable dataset) is read into a
    list first when there are several ranks, so the ranks can agree on the number of forwards. Returns
    ``{}`` when no rank counted a sample.
    """
    model.eval()
    batches, local = loader, loader.length
    if local is None and strategy.world_size > 1:
        batches = list(loader)
        local = len(batches)
    extra = 0 if local is None else strategy.eval_forward_passes(local) - local
    fillers = itertools.repeat((loader.sample_batch(), False), extra) if extra > 0 else ()
    loss_sum = torch.zeros((), dtype=torch.float64, device=strategy.device)
    samples = 0
    metric_sums: dict[str, torch.Tensor] | None = None
    counts = strategy.reports_loss
    with torch.no_grad(), workers_ended_on_error(loader):
        for batch, counted in itertools.chain(((batch, True) for batch in batches), fillers):
            batch = strategy.to_device(batch)
            with precision.autocast():
                loss, outputs = objective.evaluate(model, batch, strategy.predict)
            if loss is None or not counted or not counts:
                continue
            size = objective.samples(batch)
            loss_sum += loss.detach().double() * size
            samples += size
            if metric_sums is None:
                metrics = objective.evaluation_metrics()
                metric_sums = {name: loss_sum.new_zeros(()) for name in metrics}
            for name, metric in metrics.items():
                try:
                    sums = metric.sums(outputs, batch).detach().to(loss_sum.device, torch.float64)
                except Exception as error:  # the user's code: name the metric, keep its error as the cause
                    raise MetricError(f"metrics[{name!r}] failed: {error}") from error
                metric_sums[name] = metric_sums[name] + sums
    on_host = {name: sums.cpu() for name, sums in (metric_sums or {}).items()}
    mine = {"loss": float(loss_sum), "samples": samples, "metrics": on_host}
    parts = strategy.gather_object(mine)  # one collective; every rank gets every rank's sums
    total = sum(part["samples"] for part in parts)
    if total == 0:
        return {}
    result = {"loss": sum(part["loss"] for part in parts) / total}
    metrics = objective.evaluation_metrics()
    for name, metric in metrics.items():
        sums = [part["metrics"][name] for part in parts if name in part["metrics"]]
        if sums:
            result[name] = metric.compute(torch.stack(sums).sum(dim=0))
    return result
