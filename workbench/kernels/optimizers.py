"""torch.optim optimizers whose step is one fused numba kernel launch per param group.

    optimizer = FusedAdam(model.parameters(), lr=3e-3)                  # Adam
    optimizer = FusedAdam(model.parameters(), weight_decay=0.01, decoupled=True)   # AdamW
    optimizer = FusedAdam(model.parameters(), max_grad_norm=1.0)        # clipping inside the same launch
    optimizer = FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    Trainer(model, loss_fn, splits, config, optimizer_factory=fused_optimizer_factory)

Each param group's parameters, gradients and optimizer state live in one contiguous buffer each
(:class:`~workbench.kernels.flat_params.FlatParams`: parameters and ``.grad`` become views), so a step is
one launch over the whole group whatever its number of tensors, instead of one launch per tensor with its
host-side argument conversion. As with DeepSpeed's contiguous gradients, ``zero_grad`` zeroes the gradient
buffer in place (``set_to_none`` is ignored): a trainable parameter that gets no gradient in a step is
updated with a zero one, as torch.optim does after ``zero_grad(set_to_none=False)``. A ``.grad`` your code
replaces is copied in; a ``.grad`` set to None is skipped as torch skips it, and that group then updates
tensor by tensor (its step counts differ) until a state dict is loaded.

They are ``torch.optim.Optimizer`` subclasses with torch's state layout (``step``, ``exp_avg``,
``exp_avg_sq``; ``momentum_buffer``), so ``state_dict``/``load_state_dict`` and checkpoints work as for
torch.optim.Adam/SGD. Hyperparameters are read from each param group at every step (the Trainer sets
``param_group["lr"]`` for its schedule). Parameters must be float32, each group on one device reachable by
numba: CUDA tensors on a GPU, CPU tensors on the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from workbench._validate import check_choice, check_nonnegative
from workbench.kernels._numba import Buffer, as_buffer
from workbench.kernels.flat_params import FlatParams
from workbench.kernels.optim_kernels import adam_step, sgd_step

Params = Iterable[torch.nn.Parameter] | Iterable[dict[str, Any]]


class OptimizerSettings(Protocol):
    """What `fused_optimizer_factory` reads of its config: `workbench.train.OptimizerConfig` has it (the
    kernels sit below the Trainer and do not import it)."""

    name: str
    lr: float
    momentum: float
    nesterov: bool
    weight_decay: float
    betas: tuple[float, float]


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


class _FlatOptimizer(torch.optim.Optimizer):
    """What FusedSGD and FusedAdam share: each param group packed into a `FlatParams` (``flat[i]``), and
    its state, while every tensor's state is a view of one buffer per kind, in ``packed[i]`` (else None:
    that group steps tensor by tensor)."""

    flat: list[FlatParams]
    packed: list[dict[str, torch.Tensor] | None]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if "flat" not in self.__dict__:  # torch's __init__ adds the first groups
            self.flat, self.packed = [], []
        self.flat.append(FlatParams(self.param_groups[-1]["params"], type(self).__name__))
        self.packed.append(None)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "flat" not in self.__dict__:  # a copy (deepcopy, pickle): pack its own parameters
            self.flat = [FlatParams(group["params"], type(self).__name__) for group in self.param_groups]
        self.packed = [self._pack_loaded(flat) for flat in self.flat]

    def _pack_loaded(self, flat: FlatParams) -> dict[str, torch.Tensor] | None:
        """Loaded state (one tensor per parameter) copied into one buffer per kind, when every trainable
        parameter has it; its tensors become views. None (tensor by tensor) otherwise."""
        raise NotImplementedError

    def _pack(self, flat: FlatParams, kinds: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """New buffers for `kinds`, each tensor's state a view of them (copied from loaded state if any)."""
        packed = {}
        for kind in kinds:
            packed[kind] = flat.new_zeros()
            for p, view in zip(flat.params, flat.views(packed[kind]), strict=True):
                if kind in self.state[p]:
                    view.copy_(self.state[p][kind])
                self.state[p][kind] = view
        return packed

    def _operands(
        self, index: int, tensors: tuple[torch.Tensor, ...], names: tuple[str, ...]
    ) -> list[Buffer]:
        """Group `index`'s flat buffers as kernel operands, checked and viewed for numba once and kept while
        the group keeps the same buffers (a view costs ~25 µs of host time per tensor and step; on an H100
        machine, 2026-11-27, Adam's step took 590 µs of host time on 1M parameters, torch's fused 64 µs)."""
        kept = self.__dict__.setdefault("_kept", {})  # group → (its tensors, their operands)
        held = kept.get(index)
        if (
            held is None
            or len(held[0]) != len(tensors)
            or any(a is not b for a, b in zip(held[0], tensors, strict=True))
        ):
            held = kept[index] = (
                tensors,
                [as_buffer(t, name).flat() for t, name in zip(tensors, names, strict=False)],
            )
        return held[1]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero each group's gradient buffer in one pass; ``.grad`` stays a view of it (`set_to_none`
        is ignored: see the module's docstring)."""
        for flat in self.flat:
            flat.zero_grad()


class FusedSGD(_FlatOptimizer):
    """SGD as torch.optim.SGD (dampening 0), one fused kernel launch per param group.

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
        check_nonnegative("lr", lr, finite=True)
        check_nonnegative("momentum", momentum, finite=True)
        check_nonnegative("weight_decay", weight_decay, finite=True)
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0")
        defaults = {"lr": lr, "momentum": momentum, "nesterov": nesterov, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Also what `load_state_dict` calls: accepts torch.optim.SGD's groups, refuses what it cannot do."""
        for group in state["param_groups"]:
            _refuse_unsupported("FusedSGD", group, ("dampening", "maximize"))
            group.setdefault("nesterov", False)
        super().__setstate__(state)

    @torch.no_grad()
    def _pack_loaded(self, flat: FlatParams) -> dict[str, torch.Tensor] | None:
        if all(self.state[p].get("momentum_buffer") is not None for p in flat.params):
            return self._pack(flat, ("momentum_buffer",))
        return None

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns `closure()` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, (group, flat) in enumerate(zip(self.param_groups, self.flat, strict=True)):
            has_grad = flat.gradients()
            options = {k: group[k] for k in ("lr", "momentum", "nesterov", "weight_decay")}
            fresh = not any(self.state[p] for p in flat.params)
            if all(has_grad) and group["momentum"] and fresh:
                self.packed[index] = self._pack(flat, ("momentum_buffer",))
            if all(has_grad) and (not group["momentum"] or self.packed[index] is not None):
                tensors = (flat.param, flat.grad)
                if group["momentum"]:
                    tensors += (self.packed[index]["momentum_buffer"],)
                p, g, *buffer = self._operands(index, tensors, ("param", "grad", "momentum_buffer"))
                sgd_step(p, g, buffer[0] if buffer else None, first_step=fresh and bool(group["momentum"]),
                         **options)  # fmt: skip
            else:  # a parameter without gradient, or momentum buffers made one by one
                self._step_each(group, flat, has_grad, options)
        return loss

    def _step_each(
        self, group: dict[str, Any], flat: FlatParams, has_grad: list[bool], options: dict
    ) -> None:
        """The slow path: one launch per parameter that has a gradient (state created per tensor)."""
        for p, present in zip(flat.params, has_grad, strict=True):
            if not present:
                continue
            state = self.state[p]
            buf = state.get("momentum_buffer")
            first = buf is None
            if group["momentum"] and first:
                buf = state["momentum_buffer"] = torch.empty_like(p, memory_format=torch.contiguous_format)
            sgd_step(p, p.grad, buf, first_step=first, **options)


class FusedAdam(_FlatOptimizer):
    """Adam as torch.optim.Adam, or AdamW with ``decoupled=True``; one fused kernel launch per param group.

    Args:
        params: parameters or param-group dicts.
        lr: learning rate, ≥ 0.
        betas: (β1, β2), each in [0, 1).
        eps: added to the denominator, ≥ 0.
        weight_decay: L2 penalty on the gradient (Adam) or decoupled decay (AdamW), ≥ 0.
        decoupled: AdamW: ``p *= 1 - lr·weight_decay`` instead of adding ``weight_decay·p`` to the gradient.
        max_grad_norm: clip first, as ``torch.nn.utils.clip_grad_norm_(params, max_grad_norm)`` over every
            group: one reduction launch per group sums g² on the device, and the update kernel scales its
            gradients as it reads them (the ``.grad`` buffers stay unscaled). 0 (the default) does not clip;
            `grad_norm()` returns the norm before clipping.

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
        max_grad_norm: float = 0.0,
    ) -> None:
        check_nonnegative("lr", lr, finite=True)
        check_nonnegative("eps", eps, finite=True)
        self.max_grad_norm = check_nonnegative("max_grad_norm", max_grad_norm)
        self._grad_squares: torch.Tensor | None = None
        check_nonnegative("weight_decay", weight_decay, finite=True)
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
        for group in state["param_groups"]:
            _refuse_unsupported("FusedAdam", group, ("amsgrad", "maximize"))
            group.setdefault("decoupled", bool(group.get("decoupled_weight_decay", False)))
        self.__dict__.setdefault("max_grad_norm", 0.0)
        self.__dict__.setdefault("_grad_squares", None)
        super().__setstate__(state)

    @torch.no_grad()
    def _pack_loaded(self, flat: FlatParams) -> dict[str, torch.Tensor] | None:
        states = [self.state[p] for p in flat.params]
        if not all("exp_avg" in s and "exp_avg_sq" in s and "step" in s for s in states):
            return None
        steps = {float(s["step"]) for s in states}
        if len(steps) > 1:  # parameters stepped different numbers of times: tensor by tensor
            return None
        return self._pack_adam(flat, steps.pop())

    def _pack_adam(self, flat: FlatParams, step: float) -> dict[str, torch.Tensor]:
        packed = self._pack(flat, ("exp_avg", "exp_avg_sq"))
        packed["step"] = torch.tensor(step)  # one count for the group, shared by every tensor's state
        for p in flat.params:
            self.state[p]["step"] = packed["step"]
        return packed

    def grad_norm(self) -> float | None:
        """The global gradient norm before clipping at the last step (waits for the device), or None when
        `max_grad_norm` is 0 or no step ran."""
        if self._grad_squares is None:
            return None
        return float(self._grad_squares.sqrt())

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns `closure()` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        has_grad = [flat.gradients() for flat in self.flat]
        clip = {}
        if self.max_grad_norm:
            from workbench.kernels.clip import sum_of_squares

            self._grad_squares = sum_of_squares([flat.grad for flat in self.flat])
            clip = {"grad_squares": self._grad_squares, "max_norm": self.max_grad_norm}
        for index, (group, flat) in enumerate(zip(self.param_groups, self.flat, strict=True)):
            beta1, beta2 = group["betas"]
            options = {"lr": group["lr"], "beta1": beta1, "beta2": beta2, "eps": group["eps"], **clip}
            options |= {"weight_decay": group["weight_decay"], "decoupled": group["decoupled"]}
            if (
                all(has_grad[index])
                and self.packed[index] is None
                and not any(self.state[p] for p in flat.params)
            ):
                self.packed[index] = self._pack_adam(flat, 0.0)
            packed = self.packed[index]
            if all(has_grad[index]) and packed is not None:
                packed["step"] += 1
                step = int(packed["step"].item())
                tensors = (flat.param, flat.grad, packed["exp_avg"], packed["exp_avg_sq"])
                operands = self._operands(index, tensors, ("param", "grad", "exp_avg", "exp_avg_sq"))
                adam_step(*operands, step=step, **options)
            else:  # a parameter without gradient, or state made tensor by tensor
                self._step_each(index, flat, has_grad[index], options)
        return loss

    def _step_each(self, index: int, flat: FlatParams, has_grad: list[bool], options: dict) -> None:
        """The slow path: one launch per parameter that has a gradient; each keeps its own step count."""
        if self.packed[index] is not None:  # the counts part here: each tensor gets its own
            for p in flat.params:
                self.state[p]["step"] = self.packed[index]["step"].clone()
            self.packed[index] = None
        for p, present in zip(flat.params, has_grad, strict=True):
            if not present:
                continue
            state = self.state[p]
            if not state:  # torch's layout: a float32 step count on the CPU, moments like p
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            state["step"] += 1
            adam_step(
                p, p.grad, state["exp_avg"], state["exp_avg_sq"], step=int(state["step"].item()), **options
            )


def fused_optimizer_factory(params: Params, optimizer_config: OptimizerSettings) -> torch.optim.Optimizer:
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
