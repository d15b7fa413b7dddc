"""Notebook 08's exercise: a metric that stays exact over batches and ranks.

The Trainer evaluates a `Metric` by adding up what its ``sums(outputs, batch)`` returns over every batch of
a rank, then over the ranks, and calling ``compute(totals)`` once (`workbench.train.evaluation`). A metric
that returns a ratio per batch is averaged instead, which is not the ratio over the whole split when
batches (or ranks) hold different numbers of what it counts.

    >>> import torch
    >>> class Recall:
    ...     def __init__(self, label):
    ...         self.label = label
    ...     def sums(self, outputs, batch):
    ...         _, labels = batch
    ...         mine = labels == self.label
    ...         found = (outputs.argmax(-1)[mine] == self.label).sum()
    ...         return torch.stack([found, mine.sum()]).double()
    ...     def compute(self, totals):
    ...         return float(totals[0] / totals[1])
    >>> print(check_recall_metric(Recall(2), label=2))  # doctest: +ELLIPSIS
    Recall gives the recall of class 2 over 3 ranks' 7 batches of 4 to 31 samples: 0.6923, the same as ...
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.waiting import waits_for_learner

CLASSES = 3
RANK_BATCHES = ((5, 17, 4), (8, 8), (31, 6))  # samples per batch on each of 3 ranks; uneven on purpose


def _ranks(label: int) -> list[list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]]:
    """Seeded (outputs, (inputs, labels)) per batch per rank; the label's share and the hits vary by batch,
    and the 4-sample batch holds none of `label`."""
    generator = torch.Generator().manual_seed(0)
    ranks = []
    for sizes in RANK_BATCHES:
        batches = []
        for size in sizes:
            labels = torch.randint(0, CLASSES, (size,), generator=generator)
            if size == 4:
                labels = (labels % (CLASSES - 1) + label + 1) % CLASSES  # no sample of `label`
            outputs = torch.randn(size, CLASSES, generator=generator)
            hit = torch.rand(size, generator=generator) < 0.6  # about 60% of samples predicted right
            outputs[hit, labels[hit]] += 5.0
            batches.append((outputs, (torch.zeros(size, 1), labels)))
        ranks.append(batches)
    return ranks


@waits_for_learner
def check_recall_metric(metric: Any, label: int) -> str:
    """`metric` (``sums(outputs, batch)``, ``compute(totals)``) must give the recall of class `label` over all
    the samples of 3 ranks' uneven batches, added up as the Trainer adds them."""
    name = type(metric).__name__
    ranks = _ranks(label)
    outputs = torch.cat([o for rank in ranks for o, _ in rank])
    labels = torch.cat([batch[1] for rank in ranks for _, batch in rank])
    mine = labels == label
    want = float((outputs.argmax(-1)[mine] == label).double().mean())
    per_rank = []
    for rank, batches in enumerate(ranks):
        totals = None
        for index, (out, batch) in enumerate(batches):
            try:
                sums = torch.as_tensor(metric.sums(out, batch), dtype=torch.float64)
            except Exception as error:  # the learner's code: say where it broke
                raise ExerciseMismatch(
                    f"{name}.sums raised {type(error).__name__}: {error} on rank {rank}'s batch {index} "
                    f"({len(out)} samples, {int((batch[1] == label).sum())} of class {label})"
                ) from None
            totals = sums if totals is None else totals + sums
        per_rank.append(totals)
    got = metric.compute(torch.stack(per_rank).sum(dim=0))  # what the Trainer does after its all-gather
    if abs(float(got) - want) > 1e-9:
        raise ExerciseMismatch(f"{name} gives {float(got):.4f}; {_slip(ranks, label, want)}")
    batches = sum(len(rank) for rank in ranks)
    sizes = [size for rank in RANK_BATCHES for size in rank]
    return (
        f"{name} gives the recall of class {label} over 3 ranks' {batches} batches of {min(sizes)} to "
        f"{max(sizes)} samples: {want:.4f}, the same as over all {len(labels)} samples at once"
    )


def _slip(ranks: list[Any], label: int, want: float) -> str:
    ratios = []
    for rank in ranks:
        for out, (_, labels) in rank:
            mine = labels == label
            if mine.any():
                ratios.append(float((out.argmax(-1)[mine] == label).double().mean()))
    averaged = sum(ratios) / len(ratios)
    return (
        f"the recall over all the samples is {want:.4f} (a mean of the batches' own recalls would be "
        f"{averaged:.4f}). Hint: sums returns counts, [found, of class {label}], which add up over batches "
        "and ranks; compute divides once, at the end"
    )
