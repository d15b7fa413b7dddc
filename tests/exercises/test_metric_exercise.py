"""Notebook 08's metric exercise: a recall that adds up over batches and ranks passes; a per-batch ratio and
a metric that breaks on a batch without the class are named."""

import pytest
import torch

from workbench.exercises import ExerciseMismatch, check_recall_metric, your_turn


class Recall:
    def __init__(self, label):
        self.label = label

    def sums(self, outputs, batch):
        _, labels = batch
        mine = labels == self.label
        found = (outputs.argmax(-1)[mine] == self.label).sum()
        return torch.stack([found, mine.sum()]).double()

    def compute(self, totals):
        return float(totals[0] / totals[1])


class RecallPerBatch(Recall):  # the slip: a ratio per batch, averaged
    def sums(self, outputs, batch):
        found, total = super().sums(outputs, batch)
        return torch.stack([found / total.clamp(min=1), (total > 0).double()])

    def compute(self, totals):
        return float(totals[0] / totals[1])


class RecallDividingEarly(Recall):  # divides in sums: NaN on the batch without the class
    def sums(self, outputs, batch):
        found, total = super().sums(outputs, batch)
        if total == 0:
            raise ZeroDivisionError("no sample of the class")
        return torch.stack([found / total, torch.ones((), dtype=torch.float64)])


class Stub:
    def sums(self, outputs, batch):
        your_turn()

    def compute(self, totals):
        your_turn()


def test_counts_that_add_up_pass_and_the_slips_are_named():
    assert "the same as over all 79 samples at once" in check_recall_metric(Recall(2), label=2)
    with pytest.raises(
        ExerciseMismatch, match=r"a mean of the batches' own recalls would be 0\.\d+\)\. Hint"
    ):
        check_recall_metric(RecallPerBatch(2), label=2)
    with pytest.raises(
        ExerciseMismatch, match=r"sums raised ZeroDivisionError: .* \(4 samples, 0 of class 1\)"
    ):
        check_recall_metric(RecallDividingEarly(1), label=1)
    assert check_recall_metric(Stub(), label=2).startswith("not attempted yet: Stub still calls your_turn()")
