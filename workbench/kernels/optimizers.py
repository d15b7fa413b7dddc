"""torch.optim optimizers whose update is one fused numba kernel per parameter.

    optimizer = FusedAdam(model.parameters(), lr=3e-3)                  # Adam
    optimizer = FusedAdam(model.parameters(), weight_decay=0.01, decoupled=True)   # AdamW
    optimizer = FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    Trainer(model, loss_fn, splits, config, optimizer_factory=fused_optimizer_factory)

They are ``torch.optim.Optimizer`` subclasses with torch's state layout (``step``, ``exp_avg``,
``exp_avg_sq``; ``momentum_buffer``), so ``state_dict``/``load_state_dict`` and checkpoints work as for
torch.optim.Adam/SGD. Hyperparameters are read from each param group at every step (the Trainer sets
``param_group["lr"]`` for its schedule). Parameters and gradients must be float32 and reachable by numba:
CUDA tensors on a GPU, CPU tensors on the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from workbench._validate import check_choice, check_nonnegative
from workbench.kernels.optim_kernels import adam_step, sgd_step

if TYPE_CHECKING:  # workbench.train depends on the kernels, not the other way round
    from workbench.train.config import OptimizerConfig

Params = Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]]


def _check_beta(name: str, value: object) -> float:
    beta = check_nonnegative(name, value)
    if beta >= 1:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return beta


def _refuse_unsupported(optimizer: str, group: dict[str, Any], options: tuple[str, ...]) -> None:
    for option in options:
        if group.get(option):
            raise ValueError(
                f"{optimizer} does not support {option}={group[option]!r} (from a loaded state dict); "
                f"use torch.optim for it"
            )


class FusedSGD(torch.optim.Optimizer):
    """SGD as torch.optim.SGD (dampening 0), one fused kernel per parameter.

    Args:
        params: parameters or param-group dicts.
        lr: learning rate, ≥ 0.
        momentum: momentum factor, ≥ 0.
        nesterov: Nesterov momentum (needs momentum > 0).
        weight_decay: L2 penalty, ≥ 0.

    Example:
        >>> from workbench.kernels import torch_device
        >>> p = torch.nn.Parameter(torch.ones(3, device=torch_device()))  # CUDA, or CPU on the simulator
        >>> optimizer = FusedSGD([p], lr=0.5, momentum=0.9)
        >>> p.grad = torch.ones_like(p); optimizer.step(); p.tolist()
        [0.5, 0.5, 0.5]
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        check_nonnegative("lr", lr)
        check_nonnegative("momentum", momentum)
        check_nonnegative("weight_decay", weight_decay)
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0")
        defaults = {"lr": lr, "momentum": momentum, "nesterov": nesterov, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Also what `load_state_dict` calls: accepts torch.optim.SGD's groups, refuses what it cannot do."""
        super().__setstate__(state)
        for group in self.param_groups:
            _refuse_unsupported("FusedSGD", group, ("dampening", "maximize"))
            group.setdefault("nesterov", False)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns `closure()` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                buf = state.get("momentum_buffer")
                first = buf is None
                if group["momentum"] and first:
                    buf = state["momentum_buffer"] = torch.empty_like(
                        p, memory_format=torch.contiguous_format
                    )
                sgd_step(
                    p,
                    p.grad,
                    buf,
                    lr=group["lr"],
                    momentum=group["momentum"],
                    nesterov=group["nesterov"],
                    weight_decay=group["weight_decay"],
                    first_step=first,
                )
        return loss


class FusedAdam(torch.optim.Optimizer):
    """Adam as torch.optim.Adam, or AdamW with ``decoupled=True``; one fused kernel per parameter.

    Args:
        params: parameters or param-group dicts.
        lr: learning rate, ≥ 0.
        betas: (β1, β2), each in [0, 1).
        eps: added to the denominator, ≥ 0.
        weight_decay: L2 penalty on the gradient (Adam) or decoupled decay (AdamW), ≥ 0.
        decoupled: AdamW: ``p *= 1 - lr·weight_decay`` instead of adding ``weight_decay·p`` to the gradient.

    Example:
        >>> from workbench.kernels import torch_device
        >>> p = torch.nn.Parameter(torch.ones(2, device=torch_device()))
        >>> optimizer = FusedAdam([p], lr=0.1)
        >>> p.grad = torch.ones_like(p); optimizer.step(); [round(v, 4) for v in p.tolist()]
        [0.9, 0.9]
        >>> sorted(optimizer.state_dict()["state"][0])
        ['exp_avg', 'exp_avg_sq', 'step']
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
    ) -> None:
        check_nonnegative("lr", lr)
        check_nonnegative("eps", eps)
        check_nonnegative("weight_decay", weight_decay)
        if not (isinstance(betas, tuple | list) and len(betas) == 2):
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        betas = (_check_beta("betas[0]", betas[0]), _check_beta("betas[1]", betas[1]))
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "decoupled": bool(decoupled),
        }
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Also what `load_state_dict` calls: accepts torch.optim.Adam/AdamW's groups (AdamW's
        ``decoupled_weight_decay`` becomes ``decoupled``), refuses what it cannot do."""
        super().__setstate__(state)
        for group in self.param_groups:
            _refuse_unsupported("FusedAdam", group, ("amsgrad", "maximize"))
            group.setdefault("decoupled", bool(group.get("decoupled_weight_decay", False)))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns `closure()` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:  # torch's layout: a float32 step count on the CPU, moments like p
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["step"] += 1
                adam_step(
                    p,
                    p.grad,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    step=int(state["step"].item()),
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    decoupled=group["decoupled"],
                )
        return loss


def fused_optimizer_factory(params: Params, optimizer_config: OptimizerConfig) -> torch.optim.Optimizer:
    """The fused optimizer for a `workbench.train.OptimizerConfig`: sgd → FusedSGD, adam/adamw → FusedAdam.

    Pass it as ``Trainer(..., optimizer_factory=fused_optimizer_factory)``.

    Raises:
        ValueError: ``optimizer_config.name`` is not sgd, adam or adamw.

    Example:
        >>> from workbench.train import OptimizerConfig
        >>> config = OptimizerConfig("adamw", lr=1e-3, weight_decay=0.01)
        >>> optimizer = fused_optimizer_factory(torch.nn.Linear(2, 1).parameters(), config)
        >>> type(optimizer).__name__, optimizer.defaults["decoupled"]
        ('FusedAdam', True)
    """
    name = optimizer_config.name
    check_choice("optimizer_config.name", name, ("sgd", "adam", "adamw"))
    if name == "sgd":
        return FusedSGD(
            params,
            lr=optimizer_config.lr,
            momentum=optimizer_config.momentum,
            nesterov=optimizer_config.nesterov,
            weight_decay=optimizer_config.weight_decay,
        )
    return FusedAdam(
        params,
        lr=optimizer_config.lr,
        betas=optimizer_config.betas,
        weight_decay=optimizer_config.weight_decay,
        decoupled=name == "adamw",
    )
