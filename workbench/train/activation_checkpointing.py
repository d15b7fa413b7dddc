"""Activation checkpointing: ``TrainConfig(activation_checkpointing="blocks")`` keeps only the input of each
chosen module for backward and runs its forward again there (`torch.utils.checkpoint`, non-reentrant), so a
step holds one block's activations at a time instead of every block's: less memory for about one more
forward of compute. Hugging Face's ``gradient_checkpointing=True``, Lightning's and Accelerate's
``activation_checkpointing`` policies, torchtitan's ``activation_checkpoint.mode = "full"``.

Which modules: ``"blocks"``, the repeated blocks (the outermost modules whose class occurs more than once and
has modules of its own: a transformer's layers, a ResNet's residual blocks), or the classes named (a class or
its name, or several). The outermost match is recomputed, never one inside another. Evaluation and
prediction (no gradients) run the plain forward; the model gets its own forward back when a fit ends.
Results are the same as without (dropout's random numbers are replayed); with DDP, FSDP, pipeline and tensor
parallel each rank recomputes the modules it holds.

Example:
    >>> from workbench import models
    >>> lm = models.transformer_lm(vocab_size=16, context=8, d_model=16, n_heads=2, n_layers=2)
    >>> checkpointing = ActivationCheckpointing(lm, "blocks")
    >>> [cls.__name__ for cls in checkpointing.classes]
    ['TransformerBlock']
    >>> ActivationCheckpointing(models.mlp(4, 2), "blocks")
    Traceback (most recent call last):
    ...
    ValueError: activation_checkpointing='blocks' found no repeated block in this Sequential (no class with \
modules of its own occurs twice; its classes: Flatten ×1, Linear ×3, ReLU ×2); name the classes to recompute \
instead, modules that keep several activations for backward: activation_checkpointing=('YourBlock',)
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

BLOCKS = "blocks"


class ActivationCheckpointing:
    """The module classes whose activations a fit recomputes (`which`: None: none), chosen on `model` as
    given (a strategy may wrap or reclass it: FSDP's subclasses still match)."""

    def __init__(self, model: nn.Module, which: str | type | tuple[str | type, ...] | None) -> None:
        self.which = None if which is None else module_names(which)
        self.classes: tuple[type, ...] = () if self.which is None else _chosen_classes(model, self.which)
        # per module: its forward as it was (an instance's own, or None: its class's) and the recomputing one,
        # made once, so that a compiled model sees the same function at each fit
        self._forwards: dict[nn.Module, tuple[Any, Callable[..., Any]]] = {}

    def modules(self, model: nn.Module) -> list[nn.Module]:
        """The modules of `model` that recompute: the outermost of the chosen classes."""
        return list(_outermost(model, self.classes)) if self.classes else []

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Inside, the chosen modules of `model` (its wrapped form, as the steps run it) recompute."""
        modules = self.modules(model)
        for module in modules:
            previous = vars(module).get("forward")  # another library may have set one on the instance
            if module not in self._forwards or self._forwards[module][0] is not previous:
                self._forwards[module] = previous, _recomputing_forward(module, previous)
            module.forward = self._forwards[module][1]
        try:
            yield
        finally:
            for module in modules:
                previous = self._forwards[module][0]
                if previous is None:
                    del module.forward  # the class's own again
                else:
                    module.forward = previous


def module_names(which: object) -> str | tuple[str, ...]:
    """`which` as a config keeps it: "blocks", or a tuple of class names (ValueError if it is neither).

    Example:
        >>> module_names("blocks"), module_names(nn.Linear), module_names("TransformerBlock,FeedForward")
        ('blocks', ('Linear',), ('TransformerBlock', 'FeedForward'))
    """
    if which == BLOCKS:
        return BLOCKS
    items = which.split(",") if isinstance(which, str) else which
    items = list(items) if isinstance(items, tuple | list) else [items]
    names = tuple(item.__name__ if isinstance(item, type) else item for item in items)
    if not names or not all(isinstance(name, str) and name.isidentifier() for name in names):
        raise ValueError(
            f"activation_checkpointing must be 'blocks', a module class or its name, or several of those, "
            f"got {which!r}; e.g. activation_checkpointing='blocks' or "
            "activation_checkpointing=('TransformerBlock',)"
        )
    return names


def _recomputing_forward(module: nn.Module, previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """`module`'s forward (`previous`, else its class's at call time: FSDP reclasses a module) with what it
    saves for backward recomputed there instead."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        own = previous if previous is not None else type(module).forward.__get__(module)
        if not torch.is_grad_enabled():  # evaluation: nothing is kept for a backward
            return own(*args, **kwargs)
        return checkpoint(own, *args, use_reentrant=False, **kwargs)

    return forward


def _outermost(model: nn.Module, classes: tuple[type, ...]) -> Iterator[nn.Module]:
    for child in model.children():
        if isinstance(child, classes):
            yield child
        else:
            yield from _outermost(child, classes)


def _chosen_classes(model: nn.Module, which: str | tuple[str, ...]) -> tuple[type, ...]:
    """The classes `which` (as `module_names` gives it) stands for in `model`."""
    counts = collections.Counter(type(m) for m in model.modules() if m is not model)
    listed = ", ".join(f"{cls.__name__} ×{n}" for cls, n in counts.items())
    if which == BLOCKS:
        repeated = tuple(cls for cls, n in counts.items() if n > 1 and _has_children(model, cls))
        if not repeated:
            raise ValueError(
                f"activation_checkpointing='blocks' found no repeated block in this {type(model).__name__} "
                f"(no class with modules of its own occurs twice; its classes: {listed}); name the classes "
                "to recompute instead, modules that keep several activations for backward: "
                "activation_checkpointing=('YourBlock',)"
            )
        return tuple(dict.fromkeys(type(m) for m in _outermost(model, repeated)))  # not those inside them
    names = which
    by_name = {cls.__name__: cls for cls in counts}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(
            f"activation_checkpointing names {', '.join(map(repr, unknown))}, which this "
            f"{type(model).__name__} has no module of; its classes: {listed}; or 'blocks' for its repeated "
            "blocks"
        )
    return tuple(by_name[name] for name in names)


def _has_children(model: nn.Module, cls: type) -> bool:
    return any(type(m) is cls and next(m.children(), None) is not None for m in model.modules())
