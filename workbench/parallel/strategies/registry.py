"""The one list of strategy names: what ``--strategy``, the estimators and the `Estimator` widget accept.

Each name maps to its class (imported only when asked for, so this module needs neither torch nor
``torch.distributed``) and says how the strategy splits the work: whether each rank trains on its own
shard of every batch (the global batch grows with the ranks), and whether it splits the model's parameters.

Example:
    >>> list(STRATEGIES)
    ['single', 'ddp', 'fsdp', 'pipeline', 'tensor', 'fsdp+tp', 'ddp+tp', 'ddp+pp']
    >>> strategy_spec("fsdp").shards_data, strategy_spec("fsdp").shards_params
    (True, True)
    >>> strategy_spec("pipeline").load().__name__
    'PipelineParallel'
    >>> strategy_spec("zero")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: strategy='zero' is not supported; allowed values: 'single', 'ddp', 'fsdp', ...
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from workbench._validate import check_choice


@dataclass(frozen=True)
class StrategySpec:
    """One strategy: its name, what it is, where its class lives, and how it splits data and parameters.

    Example:
        >>> spec = STRATEGIES["fsdp+tp"]
        >>> spec.title, spec.shards_data, spec.shards_params, spec.load().__name__
        ('FSDP × tensor parallel on a 2-D device mesh', True, True, 'fsdp_tp')
    """

    name: str
    title: str
    home: str  # "module:Class" or "module:function" (building the strategy from its options)
    shards_data: bool  # each rank trains on its own shard of every batch
    shards_params: bool  # no rank holds every parameter

    def load(self) -> Any:
        """The strategy class, or the function that builds it (imports its module)."""
        module, _, name = self.home.partition(":")
        return getattr(importlib.import_module(module), name)


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec("single", "one device", "workbench.train.strategy:SingleDevice", False, False),
        StrategySpec(
            "ddp",
            "data parallel (DDP)",
            "workbench.parallel.strategies.data_parallel:DataParallel",
            True,
            False,
        ),
        StrategySpec(
            "fsdp",
            "fully sharded data parallel (FSDP2)",
            "workbench.parallel.strategies.fsdp:FullyShardedDataParallel",
            True,
            True,
        ),
        StrategySpec(
            "pipeline",
            "pipeline parallel (GPipe, 1F1B)",
            "workbench.parallel.strategies.pipeline:PipelineParallel",
            False,
            True,
        ),
        StrategySpec(
            "tensor",
            "tensor parallel (Megatron-style)",
            "workbench.parallel.strategies.tensor_parallel:TensorParallel",
            False,
            True,
        ),
        StrategySpec(
            "fsdp+tp",
            "FSDP × tensor parallel on a 2-D device mesh",
            "workbench.parallel.strategies.composed:fsdp_tp",
            True,
            True,
        ),
        StrategySpec(
            "ddp+tp",
            "DDP × tensor parallel on a 2-D device mesh",
            "workbench.parallel.strategies.composed:ddp_tp",
            True,
            True,
        ),
        StrategySpec(
            "ddp+pp",
            "DDP × pipeline: replicas of a pipeline on data shards",
            "workbench.parallel.strategies.composed:ddp_pp",
            True,
            True,
        ),
    )
}
COMPOSED = ("fsdp+tp", "ddp+tp", "ddp+pp")  # on a 2-D mesh: ranks / k data groups of k ranks (tp or pp)
DEFAULT_TP = 2  # ranks per tensor-parallel group (or pipeline stages) of a composition, unless told

DISTRIBUTED = tuple(name for name in STRATEGIES if name != "single")  # those that run on several processes


def strategy_spec(name: str) -> StrategySpec:
    """The registered strategy `name`; ValueError naming the allowed names otherwise."""
    check_choice("strategy", name, tuple(STRATEGIES))
    return STRATEGIES[name]
