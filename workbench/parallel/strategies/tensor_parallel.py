"""Tensor parallelism: single layers split across ranks (``torch.distributed.tensor.parallel``).

A Linear layer's weight is cut by output features (*column-wise*: each rank computes some of the outputs)
or by input features (*row-wise*: each rank computes a partial sum over its inputs, then an all-reduce adds
them). A column-wise layer followed by a row-wise one needs no communication between them (Megatron's MLP):
the first leaves each rank with its slice of the hidden features, which is exactly the input slice the
second wants. In attention the q/k/v projections are column-wise (each rank gets whole heads) and the
output projection row-wise. Every rank sees the same batch; layers not in the plan are replicated.

    strategy = TensorParallel()                       # the plan comes from the model (see default_plan)
    strategy = TensorParallel({"1": "colwise", "3": "rowwise"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from workbench.parallel.strategies.sharded import ShardedStrategy
from workbench.parallel.strategies.split_check import SplitCheck
from workbench.train.compilation import refuse_compile
from workbench.train.config import TrainConfig
from workbench.train.strategy import Batch, Objective

STYLES = ("colwise", "rowwise")
_ACTIVATIONS = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Dropout)


class TensorParallel(ShardedStrategy):
    """Split the plan's Linear layers across all ranks; every rank trains on the same batches.

    Args:
        plan: dotted module name → ``"colwise"`` or ``"rowwise"``, e.g. ``{"block0.mlp.fc1": "colwise",
            "block0.mlp.fc2": "rowwise"}``; None takes `default_plan` of the model. Column-wise outputs stay
            split, so a column-wise layer must feed a row-wise one (or attention heads that then feed one).
        check: before the first update, run the first batch through the split model and through a copy of
            the whole model on the CPU, and stop with the plan and the fix if they differ (`split_check`);
            False skips it (a model whose forward runs only on the GPU is skipped anyway).
        sync_control: see `DistributedStrategy` (`launch` turns it on).

    Example:
        >>> from workbench import models
        >>> from workbench.train import TrainConfig
        >>> model = models.mlp(64, 10, hidden=(32, 32))
        >>> default_plan(model)
        {'1': 'colwise', '3': 'rowwise'}
        >>> TensorParallel({"mlp.fc1": "colwise"}).validate(model, TrainConfig(), world_size=2)
        Traceback (most recent call last):
        ...
        ValueError: the tensor-parallel plan names 'mlp.fc1', which is not a module of the model; its ...
    """

    name = "tensor parallel"

    def __init__(
        self, plan: Mapping[str, str] | None = None, *, check: bool = True, sync_control: bool = False
    ) -> None:
        super().__init__(sync_control=sync_control)
        self.check = check
        self._split_check: SplitCheck | None = None
        if plan is not None and not isinstance(plan, Mapping):
            raise ValueError(f"plan must map module names to 'colwise' or 'rowwise', got {plan!r}")
        self.plan = None if plan is None else dict(plan)

    def validate(self, model: nn.Module | None, config: TrainConfig, world_size: int | None = None) -> None:
        """Raise ValueError if the plan names a missing module, a layer that is not Linear, a style other
        than colwise/rowwise, a size that does not divide among the ranks, or if fp16 is asked for.
        Without a model, only the styles and the precision are checked."""
        world_size = self.world_size if world_size is None else world_size
        refuse_compile(config.compile, "TensorParallel", "compiling its DTensor layers is not built here")
        if config.precision == "fp16":
            raise ValueError("precision='fp16' is not supported with tensor parallel here; use 'bf16'")
        if model is None:
            for name, style in (self.plan or {}).items():
                _check_style(name, style)
            return
        plan = self.plan_for(model)
        modules = dict(model.named_modules())
        linears = _first([name for name, m in modules.items() if isinstance(m, nn.Linear)])
        for name, style in plan.items():
            if name not in modules:
                raise ValueError(
                    f"the tensor-parallel plan names {name!r}, which is not a module of the model; its "
                    f"Linear layers are: {linears}"
                )
            _check_style(name, style)
            layer = modules[name]
            if not isinstance(layer, nn.Linear):
                raise ValueError(
                    f"the tensor-parallel plan names {name!r}, a {type(layer).__name__}; only Linear layers "
                    f"split here; the model's Linear layers are: {linears}"
                )
            size = layer.out_features if style == "colwise" else layer.in_features
            if size % world_size:
                raise ValueError(_does_not_split(name, style, layer, world_size))
        for name, module in modules.items():
            q, heads = _heads(module)
            if heads and plan.get(f"{name}.{q}") == "colwise" and heads % world_size:
                raise ValueError(
                    f"{name!r} has n_heads={heads}, which does not divide among {world_size} ranks (each "
                    f"rank computes whole heads); launch a number of ranks that divides {heads}, or build "
                    f"the model with a multiple of {world_size} heads"
                )

    def plan_for(self, model: nn.Module) -> dict[str, str]:
        """The plan this strategy applies to `model`: the one given, or `default_plan`."""
        return self.plan if self.plan is not None else default_plan(model)

    @property
    def data_rank(self) -> int:
        return 0  # every rank trains on the same batches

    @property
    def data_world_size(self) -> int:
        return 1

    @property
    def reports_loss(self) -> bool:
        return self.rank == 0  # the others compute the same loss

    def wrap(self, model: nn.Module) -> nn.Module:
        """Split the plan's layers across the ranks, in place (`parallelize_module`)."""
        self._split_check = SplitCheck(model) if self.check else None  # the whole model, before the split
        apply_tensor_parallel(model.to(self.device), self.mesh(), self.plan_for(model))
        self.module = model
        return model

    def forward_backward(self, model: nn.Module, group: list[Batch], objective: Objective, *args: Any) -> Any:
        """As every strategy's; the first one checks the split model against the whole one first."""
        if self._split_check is not None:
            check, self._split_check = self._split_check, None
            check.run(self, model, group[0], objective, self.plan_for(model))
        return super().forward_backward(model, group, objective, *args)

    def summary(self) -> str:
        return "tensor parallel"


def apply_tensor_parallel(model: nn.Module, mesh: Any, plan: Mapping[str, str]) -> None:
    """Split the `plan`'s Linear layers over the 1-D `mesh` ("colwise" / "rowwise"), in place."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles: dict[str, Any] = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, mesh, {name: styles[style]() for name, style in plan.items()})


ATTENTION_NAMES = (  # (q, k, v, output) Linear children of an attention module, as models name them
    ("q", "k", "v", "proj"),  # workbench.models
    ("q_proj", "k_proj", "v_proj", "o_proj"),  # Llama, Mistral, Qwen (Hugging Face)
    ("wq", "wk", "wv", "wo"),  # Meta's Llama, torchtitan
)
FEED_FORWARD_NAMES = (  # (column-wise..., row-wise) Linear children of a feed-forward module
    (("fc1",), "fc2"),  # workbench.models, ViT, many MLPs
    (("gate_proj", "up_proj"), "down_proj"),  # Llama-style SwiGLU (Hugging Face)
    (("up_proj",), "down_proj"),
    (("w1", "w3"), "w2"),  # Meta's Llama, torchtitan
    (("c_fc",), "c_proj"),  # nanoGPT
)


def default_plan(model: nn.Module) -> dict[str, str]:
    """A Megatron-style plan read off the model's structure.

    - attention (a module with Linear children ``q``, ``k``, ``v``, ``proj``, like
      `workbench.models.CausalSelfAttention`, or ``q_proj``…``o_proj``, or ``wq``…``wo``, as Llama names
      them): q, k, v column-wise, the output projection row-wise;
    - a feed-forward module with Linear children ``fc1`` and ``fc2`` (or ``gate_proj``/``up_proj`` and
      ``down_proj``, ``w1``/``w3`` and ``w2``, ``c_fc`` and ``c_proj``): the first column-wise, the last
      row-wise;
    - in an ``nn.Sequential``: each Linear followed (after activations or dropout only) by another Linear:
      the first column-wise, the second row-wise (an MLP's hidden layers, a CNN's classifier head).

    The Trainer checks the plan on the first batch against the whole model (`split_check`), so a forward
    that needs the split features whole (a norm between, heads counted from a fixed ``n_heads``) stops
    there with the plan, not later. Raises ValueError when the model has none of these (give the plan).

    Example:
        >>> class Mlp(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.gate_proj, self.up_proj = nn.Linear(8, 16), nn.Linear(8, 16)
        ...         self.down_proj = nn.Linear(16, 8)
        >>> default_plan(Mlp())
        {'gate_proj': 'colwise', 'up_proj': 'colwise', 'down_proj': 'rowwise'}
    """
    plan: dict[str, str] = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        children = dict(module.named_children())
        attention = _matching(children, [(names[:3], names[3]) for names in ATTENTION_NAMES])
        found = attention or _matching(children, FEED_FORWARD_NAMES)
        if found is not None:
            columns, row = found
            plan.update({f"{prefix}{column}": "colwise" for column in columns})
            plan[f"{prefix}{row}"] = "rowwise"
        elif isinstance(module, nn.Sequential):
            plan.update(_sequential_pairs(module, prefix))
    if not plan:
        known = ", ".join("/".join(names) for names in ATTENTION_NAMES)
        raise ValueError(
            f"no tensor-parallel plan found for {type(model).__name__}: it has no attention ({known}), "
            "no feed-forward (fc1, fc2 or gate_proj, up_proj, down_proj) and no Linear → activation → Linear "
            "in an nn.Sequential; give TensorParallel(plan={'name.of.linear1': 'colwise', "
            "'name.of.linear2': 'rowwise'})"
        )
    return plan


def _matching(
    children: dict[str, nn.Module], patterns: Sequence[tuple[tuple[str, ...], str]]
) -> tuple[tuple[str, ...], str] | None:
    """The first pattern (column-wise names, row-wise name) whose names are all Linear `children`."""
    for columns, row in patterns:
        if all(isinstance(children.get(name), nn.Linear) for name in (*columns, row)):
            return columns, row
    return None


def _sequential_pairs(sequential: nn.Sequential, prefix: str) -> dict[str, str]:
    plan: dict[str, str] = {}
    pending: str | None = None  # a Linear waiting for its row-wise partner
    for name, layer in sequential.named_children():
        if isinstance(layer, nn.Linear):
            if pending is None:
                pending = name
            else:
                plan[f"{prefix}{pending}"], plan[f"{prefix}{name}"] = "colwise", "rowwise"
                pending = None
        elif not isinstance(layer, _ACTIVATIONS):
            pending = None
    return plan


def _first(names: list[str], shown: int = 8) -> str:
    """The first `shown` names, and how many there are in all."""
    if not names:
        return "none"
    more = f", … ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _does_not_split(name: str, style: str, layer: nn.Linear, world_size: int) -> str:
    """Why `layer` cannot split `style`-wise among `world_size` ranks, and the rank counts that would."""
    size, features = (layer.out_features, "output") if style == "colwise" else (layer.in_features, "input")
    counts = [str(ranks) for ranks in range(2, 17) if size % ranks == 0][:4]
    fix = f"split it over {' or '.join(counts)} ranks" if counts else "no count of 2 to 16 ranks does"
    return (
        f"{name!r} ({style}, Linear {layer.in_features}→{layer.out_features}) has {size} {features} "
        f"features, which do not divide among {world_size} ranks; {fix}, or leave {name!r} out of the plan "
        "(TensorParallel(plan={...}))"
    )


def _check_style(name: str, style: object) -> None:
    if style not in STYLES:
        raise ValueError(
            f"the tensor-parallel plan gives {name!r} style {style!r}; allowed values: 'colwise', 'rowwise'"
        )


def _heads(module: nn.Module) -> tuple[str, int]:
    """The query layer's name and the attention heads of a module with one (q, q_proj or wq) and a
    ``head_dim`` (as models.CausalSelfAttention); ("", 0) for any other module."""
    head_dim = getattr(module, "head_dim", None)
    for q, *_ in ATTENTION_NAMES:
        layer = getattr(module, q, None)
        if isinstance(head_dim, int) and isinstance(layer, nn.Linear) and head_dim > 0:
            return q, layer.out_features // head_dim
    return "", 0
