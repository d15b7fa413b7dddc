"""`StageTimeline`: the spans of one pipeline stage's step, recorded with module and tensor hooks (each
micro-batch's forward and backward); `workbench.parallel.strategies.timeline` reads them into bubbles."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn


class StageTimeline:
    """Times each micro-batch's forward and backward on one stage with module and tensor hooks."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, float, float]] = []
        self.microbatches = 0  # per schedule step (an accumulated optimizer step runs several)
        self.schedule = ""  # "GPipe" or "1F1B"
        self._recording = False
        self._forward_index = 0
        self._forward_start = 0.0
        self._backward: dict[int, float] = {}  # micro-batch → when its backward began
        self._last_grad = 0.0

    def attach(self, stage: nn.Module) -> None:
        stage.register_forward_pre_hook(self._before_forward)
        stage.register_forward_hook(self._after_forward)
        for param in stage.parameters():
            param.register_post_accumulate_grad_hook(self._after_grad)

    def start_step(self) -> None:
        self.spans, self._forward_index, self._backward = [], 0, {}
        self._recording = True

    def stop_step(self, keep: bool) -> None:
        self._recording = False
        self._close_backwards()
        if not keep:
            self.spans = []

    def _before_forward(self, module: nn.Module, args: Any) -> None:
        self._forward_start = time.time()

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        # shape inference and evaluation run forwards without gradients: not part of a training step
        if not (self._recording and isinstance(output, torch.Tensor) and output.requires_grad):
            return
        index = self._forward_index
        self._forward_index += 1
        self.spans.append(("F", index, self._forward_start, time.time()))
        output.register_hook(lambda grad: self._begin_backward(index))

    def _begin_backward(self, index: int) -> None:
        self._close_backwards()
        self._backward[index] = time.time()
        self._last_grad = self._backward[index]

    def _after_grad(self, param: torch.Tensor) -> None:
        self._last_grad = time.time()

    def _close_backwards(self) -> None:
        """A backward ends with its last parameter gradient (the next backward, or the step, begins after)."""
        for index, start in self._backward.items():
            self.spans.append(("B", index, start, max(start, self._last_grad)))
        self._backward = {}
