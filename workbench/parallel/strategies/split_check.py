"""Does the tensor-parallel model compute what the whole model does? Checked once, on the first batch.

A plan is a claim about the model's forward: between a column-wise Linear and its row-wise partner each rank
holds only its slice of the hidden features, so nothing there may need all of them. Only the forward knows
whether that holds: a LayerNorm there fails with a shape error, and a softmax or mean over those features
silently computes something else. So before the first update the first batch goes through the split model
(every rank) and through a copy of the whole model with the same weights (rank 0, on the CPU, in eval mode
for both), and training stops with the plan and the fix when they differ.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench._module_copy import copied_with
from workbench.train.strategy import Batch, Objective

RTOL = {torch.float32: 1e-3, torch.float64: 1e-6}  # sums over ranks taken in another order, with room
RTOL_HALF = 3e-2  # bf16 / fp16 weights


@dataclass(frozen=True)
class Verdict:
    """Rank 0's comparison of the split model with the whole one on the first batch, sent to every rank."""

    differs: str | None = None  # why the split model computes something else (None: it agrees, or unchecked)
    # the whole model fails on the batch too: the error is the model's, not the plan's
    whole_fails: bool = False


class SplitCheck:
    """A CPU copy of the whole model, taken before the split, and the comparison it is kept for."""

    def __init__(self, model: nn.Module) -> None:
        self.whole = copied_with(model, lambda t: t.detach().to("cpu", copy=True))  # never twice on a GPU

    def run(self, strategy: Any, split: nn.Module, batch: Batch, objective: Objective, plan: Mapping) -> None:
        """Raise ValueError on every rank when `split` (every rank calls this) fails on `batch` where the
        whole model holding the same weights does not, or computes other outputs; an error the whole model
        raises too is the model's own and is raised as it is. Each call takes a copy of `objective`, so its
        first-batch checks (shapes, metrics) are still to come for the training step."""
        modes = {module: module.training for module in split.modules()}
        split.eval()
        try:
            with torch.no_grad():
                failure: BaseException | None = None
                try:
                    split_run = copy.copy(objective)(split, strategy.to_device(batch))
                except (RuntimeError, ValueError) as error:
                    failure, split_run = error, None
                failed = torch.tensor([0.0 if failure is None else 1.0], device=strategy.device)
                any_failed = bool(strategy.all_reduce(failed, "max").item())
                state = strategy.model_state(split)  # the weights the ranks hold, whole, on rank 0
                verdict = Verdict()
                if strategy.is_main:
                    verdict = self._verdict(state, batch, objective, split_run, plan, strategy.world_size)
        finally:
            for module, training in modes.items():
                module.train(training)
        verdict = strategy.gather_object(verdict)[0]  # rank 0's
        try:
            if verdict.whole_fails and failure is not None:
                raise failure
            if any_failed:
                raise ValueError(self._failed(plan, strategy.world_size, failure)) from failure
            if verdict.differs is not None:
                raise ValueError(verdict.differs)
        finally:
            self.whole = None  # the copy was kept for this check only

    def _verdict(
        self,
        state: dict[str, Any],
        batch: Batch,
        objective: Objective,
        split: tuple[torch.Tensor, Any] | None,
        plan: Mapping,
        world_size: int,
    ) -> Verdict:
        """Whether the whole model's loss and outputs on `batch` differ from `split`'s (None: the split model
        failed); nothing to say when they agree or the whole model cannot run on the CPU (say a forward that
        makes CUDA tensors: then unchecked)."""
        assert self.whole is not None
        self.whole.load_state_dict(state)
        self.whole.eval()
        try:
            whole_loss, whole_outputs = _own_copy(objective)(self.whole, batch)
        except (RuntimeError, ValueError):
            return Verdict(whole_fails=split is None)
        if split is None:
            return Verdict()  # the split model alone failed: every rank says so
        split_loss, split_outputs = split
        pairs = [(split_outputs, whole_outputs)] if _same_shape(split_outputs, whole_outputs) else []
        pairs.append((split_loss, whole_loss))
        for got, want in pairs:
            rtol = RTOL.get(got.dtype, RTOL_HALF)
            got, want = got.detach().cpu().double(), want.detach().double()
            if not torch.allclose(got, want, rtol=rtol, atol=rtol * 1e-2, equal_nan=True):
                gap = (got - want).abs().max().item()
                losses = f"{split_loss.item():.6g}, the whole model's {whole_loss.item():.6g}"
                return Verdict(
                    "tensor parallel does not compute what the model does: on the first batch (eval mode) "
                    f"the split model's loss is {losses} (apart by up to {gap:.3g}). "
                    + self._why(plan, world_size)
                )
        return Verdict()

    def _failed(self, plan: Mapping, world_size: int, failure: BaseException | None) -> str:
        if failure is None:
            return "another rank's tensor-parallel model failed on the first batch (its error is above)"
        return (
            f"the tensor-parallel model failed on the first batch: {type(failure).__name__}: {failure}. "
            f"{self._why(plan, world_size)}"
        )

    def _why(self, plan: Mapping, world_size: int) -> str:
        return (
            f"The plan splits {describe_plan(self.whole, plan, world_size)}. Between a column-wise layer and "
            "its row-wise partner each rank holds only its slice of the features, so a layer or operation "
            "there that needs all of them (a norm, a softmax or mean over them, a view to the full width) "
            "fails or computes something else; and a column-wise layer must feed a row-wise one. Give a plan "
            "without such a pair, TensorParallel(plan={...}), or train this model with DataParallel()"
        )


def describe_plan(model: nn.Module, plan: Mapping, world_size: int) -> str:
    """The plan's layers, their styles and the features each rank holds, for messages.

    Example:
        >>> from workbench import models
        >>> print(describe_plan(models.mlp(8, 2, hidden=(4,)), {"1": "colwise", "3": "rowwise"}, 2))
        '1' column-wise (4 output features, 2 on each of 2 ranks), '3' row-wise (4 input features, 2 on each)
    """
    modules = dict(model.named_modules())
    parts = []
    for name, style in plan.items():
        layer = modules.get(name)
        if not isinstance(layer, nn.Linear):
            parts.append(f"{name!r} {style}")
            continue
        colwise = style == "colwise"
        size, features = (layer.out_features, "output") if colwise else (layer.in_features, "input")
        ranks = f"each of {world_size} ranks" if not parts else "each"
        kind = "column-wise" if colwise else "row-wise"
        parts.append(f"{name!r} {kind} ({size} {features} features, {size // world_size} on {ranks})")
    return ", ".join(parts) if parts else "no layer"


def _same_shape(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape


def _own_copy(objective: Objective) -> Objective:
    """A copy of `objective` with a loss module of its own: the whole model's run on the CPU moves it there,
    and the training's stays on the device."""
    mine = copy.copy(objective)
    if isinstance(mine.loss_fn, nn.Module):
        mine.loss_fn = copy.deepcopy(mine.loss_fn)
    return mine
