"""Parallelisms composed over one device mesh: ``ComposedParallel("fsdp+tp", tp=2)``.

The ranks form a grid with one named dimension per parallelism (torch's ``DeviceMesh``). On 4 ranks with
``tp=2``, ranks {0, 1} and {2, 3} are tensor-parallel pairs (adjacent ranks: in practice the GPUs of one
machine, which talk in every layer) and {0, 2}, {1, 3} the data-parallel groups (which talk once per step or
per FSDP unit). Each parallelism is a function applied to the model on its own dimension, in the style of
torchtitan's ``apply_*``, kept in its own module beside the strategy that uses it alone;
`ComposedParallel.wrap` applies them in order, tensor parallel first:

- `apply_tensor_parallel` on ``"tp"``: the plan's Linear layers split column- and row-wise (Megatron);
- `apply_fully_shard` on ``"fsdp"``: FSDP2 shards what tensor parallel left on each rank;
- `average_gradients` on ``"dp"``: the gradients averaged over the data-parallel group after backward.

A tensor-parallel pair reads the same samples; the data-parallel groups read different shards, so the global
batch is ``batch_size × (ranks / tp)``. Adding a parallelism is one ``apply_*`` function, a name in
`DIMENSIONS`, and a line in `workbench.parallel.strategies.registry` (docs/ARCHITECTURE.md works one through).

    strategy = ComposedParallel("fsdp+tp", tp=2)          # or "ddp+tp"; --strategy fsdp+tp on the CLI
    launch(train, 4, strategy=strategy, model=model, config=config)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from workbench._validate import check_int
from workbench.parallel.strategies.distributed import average_gradients
from workbench.parallel.strategies.fsdp import FullyShardedDataParallel, apply_fully_shard
from workbench.parallel.strategies.pipeline import PipelineParallel
from workbench.parallel.strategies.registry import DEFAULT_TP
from workbench.parallel.strategies.sharded import ShardedStrategy
from workbench.parallel.strategies.tensor_parallel import TensorParallel, apply_tensor_parallel
from workbench.train.compilation import refuse_compile
from workbench.train.config import TrainConfig
from workbench.train.step_time import Clock

# the names a composition may use, by the mesh dimension they parallelise over
DIMENSIONS = {"ddp": "dp", "dp": "dp", "fsdp": "fsdp", "tp": "tp", "pp": "pp"}
DATA_DIMENSIONS = ("dp", "fsdp")
COMPOSITIONS = ("fsdp+tp", "ddp+tp", "ddp+pp")
_TITLES = {"dp": "DDP", "fsdp": "FSDP", "tp": "tensor parallel", "pp": "pipeline"}


def parse_composition(composition: str) -> tuple[str, str]:
    """``"fsdp+tp"`` → ``("fsdp", "tp")``: the data dimension and the model dimension; ValueError naming
    the fix for a name that is not a composition this module builds.

    Example:
        >>> parse_composition("ddp+tp")
        ('dp', 'tp')
        >>> parse_composition("fsdp+ddp")
        Traceback (most recent call last):
        ...
        ValueError: 'fsdp+ddp' splits the data twice (fsdp and ddp); a composition takes one data ...
    """
    parts = composition.split("+") if isinstance(composition, str) else []
    unknown = [part for part in parts if part not in DIMENSIONS]
    if len(parts) != 2 or unknown:
        raise ValueError(
            f"strategy {composition!r} is not a composition this workbench builds; the compositions: "
            f"{', '.join(map(repr, COMPOSITIONS))} (a data dimension, ddp or fsdp, plus tp or pp)"
        )
    dims = [DIMENSIONS[part] for part in parts]
    data = [d for d in dims if d in DATA_DIMENSIONS]
    if len(data) == 2:
        raise ValueError(
            f"{composition!r} splits the data twice ({' and '.join(parts)}); a composition takes one data "
            "dimension (ddp or fsdp) and tp: 'fsdp+tp' or 'ddp+tp'"
        )
    if not data:
        raise ValueError(f"{composition!r} has no data dimension; use 'fsdp+tp', 'ddp+tp' or 'ddp+pp'")
    model = next(d for d in dims if d not in DATA_DIMENSIONS)
    if (data[0], model) == ("fsdp", "pp"):
        raise ValueError(
            f"{composition!r}: FSDP over pipeline stages is not built here (each stage would gather its "
            "shards once per micro-batch); use 'ddp+pp', or 'fsdp+tp' to split the layers instead"
        )
    return data[0], model


class ComposedParallel(ShardedStrategy):
    """A data dimension (DDP or FSDP) and tensor parallel on one 2-D device mesh of every rank.

    Args:
        composition: ``"fsdp+tp"`` or ``"ddp+tp"`` (see `parse_composition`).
        tp: ranks per tensor-parallel group (adjacent ranks); the data dimension gets ranks / tp.
        plan: the tensor-parallel plan (see `TensorParallel`); None reads it off the model.
        units, reshard_after_forward: FSDP's (see `FullyShardedDataParallel`), for ``"fsdp+tp"``.
        sync_control: see `DistributedStrategy` (`launch` turns it on).

    Example:
        >>> from workbench import models
        >>> from workbench.train import TrainConfig
        >>> ComposedParallel("fsdp+tp", tp=2).validate(models.mlp(64, 10, hidden=(32,)), TrainConfig(),
        ...                                            world_size=4)
        >>> ComposedParallel("ddp+tp", tp=3).validate(None, TrainConfig(), world_size=4)
        Traceback (most recent call last):
        ...
        ValueError: 'ddp+tp' with tp=3 needs a number of ranks divisible by 3, got 4; launch 3, 6, ...
    """

    def __init__(
        self,
        composition: str = "fsdp+tp",
        *,
        tp: int = DEFAULT_TP,
        plan: Mapping[str, str] | None = None,
        units: Sequence[str] | None = None,
        reshard_after_forward: bool = True,
        sync_control: bool = False,
    ) -> None:
        super().__init__(sync_control=sync_control)
        self.composition = composition
        self.data_dim, self.model_dim = parse_composition(composition)
        if self.model_dim != "tp":
            raise ValueError(
                f"ComposedParallel composes tensor parallel with a data dimension; for {composition!r} use "
                "PipelineParallel(stages=...) (its replicas are the data dimension), or ddp_pp(pp=...)"
            )
        self.tp = check_int("tp", tp, minimum=1)
        self.tensor = TensorParallel(plan)
        self.fsdp = FullyShardedDataParallel(units=units, reshard_after_forward=reshard_after_forward)
        self.name = f"{_TITLES[self.data_dim]} × tensor parallel"
        self._mesh: Any = None
        self._dp_group: Any = None  # "ddp+tp": the group whose gradients are averaged
        self._sync_gradients = True

    def validate(self, model: nn.Module | None, config: TrainConfig, world_size: int | None = None) -> None:
        """ValueError for a number of ranks tp does not divide, a plan that does not split over tp ranks,
        FSDP units that name no submodule, fp16 or compile."""
        world_size = self.world_size if world_size is None else world_size
        refuse_compile(config.compile, "ComposedParallel", "compiling DTensor layers is not built here")
        if world_size % self.tp:
            multiples = ", ".join(str(self.tp * k) for k in (1, 2)) + ", ..."
            raise ValueError(
                f"{self.composition!r} with tp={self.tp} needs a number of ranks divisible by {self.tp}, got "
                f"{world_size}; launch {multiples} ranks, or choose tp among the divisors of {world_size}"
            )
        self.tensor.validate(model, config, world_size=self.tp)
        if self.data_dim == "fsdp":
            self.fsdp.validate(model, config, world_size=world_size // self.tp)

    def mesh(self) -> Any:
        """The 2-D mesh (data, tp) of every rank: tensor-parallel groups of adjacent ranks."""
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape, names = (self.world_size // self.tp, self.tp), (self.data_dim, self.model_dim)
            self._mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=names)
        return self._mesh

    @property
    def data_rank(self) -> int:
        return self.rank // self.tp  # a tensor-parallel group reads the same samples

    @property
    def data_world_size(self) -> int:
        return self.world_size // self.tp

    @property
    def reports_loss(self) -> bool:
        return self.rank % self.tp == 0  # the others of its group compute the same loss

    def wrap(self, model: nn.Module) -> nn.Module:
        """Tensor parallel on "tp", then FSDP on "fsdp" or gradient averaging on "dp", in place.

        Also quiets torch's warning that a 2-D DTensor is gathered (or its norm reduced) in two collectives
        rather than one: what checkpoints and the gradient norm do, once per logged step at most."""
        logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
        mesh = self.mesh()
        model.to(self.device)
        apply_tensor_parallel(model, mesh[self.model_dim], self.tensor.plan_for(model))
        if self.data_dim == "fsdp":
            units = self.fsdp.unit_modules(model)
            apply_fully_shard(
                model, mesh["fsdp"], units, reshard_after_forward=self.fsdp.reshard_after_forward
            )
        else:
            self._dp_group = mesh["dp"].get_group()
        self.module = model
        return model

    def backward(self, loss: torch.Tensor, clock: Clock) -> None:
        super().backward(loss, clock)
        if self._dp_group is not None and self._sync_gradients and self.data_world_size > 1:
            assert self.module is not None
            average_gradients(self.module, self._dp_group, self.data_world_size)
            clock.mark("comm")

    def no_sync(self, model: nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """Accumulate gradients without averaging (all but the last micro-batch)."""
        if not active:
            return contextlib.nullcontext()
        return self.fsdp.no_sync(model, True) if self.data_dim == "fsdp" else self._unsynced()

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        self._sync_gradients = False
        try:
            yield
        finally:
            self._sync_gradients = True

    def eval_forward_passes(self, local_batches: int) -> int:
        """With FSDP every forward gathers parameters from the data group: the most batches any rank has."""
        if self.data_dim != "fsdp":
            return local_batches
        return int(self.all_reduce(torch.tensor(local_batches, device=self.device), "max"))

    def summary(self) -> str:
        return f"{self.name}, tensor-parallel groups of {self.tp}"


def fsdp_tp(**options: Any) -> ComposedParallel:
    """``ComposedParallel("fsdp+tp", **options)`` (the registry's ``fsdp+tp``)."""
    return ComposedParallel("fsdp+tp", **options)


def ddp_tp(**options: Any) -> ComposedParallel:
    """``ComposedParallel("ddp+tp", **options)`` (the registry's ``ddp+tp``)."""
    return ComposedParallel("ddp+tp", **options)


def ddp_pp(pp: int = DEFAULT_TP, **options: Any) -> PipelineParallel:
    """DDP × pipeline (the registry's ``ddp+pp``): pipelines of `pp` stages (adjacent ranks), ranks / pp
    replicas of them on shards of the data, gradients averaged over each stage's replicas:
    ``PipelineParallel(stages=pp, **options)``."""
    return PipelineParallel(stages=pp, **options)
