"""Distributed training: strategies over a ``torch.distributed`` process group, and launching their
processes from a notebook cell or under torchrun.

- `DataParallel` (DDP), `FullyShardedDataParallel` (FSDP2), `PipelineParallel` (GPipe/1F1B) and
  `TensorParallel`, all built on `DistributedStrategy`, and `ComposedParallel` (``"fsdp+tp"``, ``"ddp+tp"``
  on one 2-D device mesh); pass one to ``Trainer(..., strategy=...)``.
- `launch(fn, nprocs)` / `Launch`: fork N workers from a notebook, stream their events to your callbacks
  (a `Dashboard`), forward its controls, return rank 0's result. Under torchrun: ``Strategy.from_env()``.
- `STRATEGIES` / `strategy_spec`: the registered names ("ddp", "fsdp", ...) and how each splits the work.

Three floors, each importing only those below it: `launching` (how rank processes start and talk) →
`strategies` (what happens to a model on the ranks) → `group` (how one process joins the process group).
Names are imported on first use, so ``workbench.parallel.strategies.registry`` needs neither torch nor
``torch.distributed``.

    >>> from workbench.parallel import launch
    >>> launch(lambda strategy: strategy.world_size, nprocs=2, verbose=False)
    2
"""

from __future__ import annotations

from workbench._lazy import lazy_attributes

_HOMES = {
    "ComposedParallel": "workbench.parallel.strategies.composed",
    "DataParallel": "workbench.parallel.strategies.data_parallel",
    "DistributedStrategy": "workbench.parallel.strategies.distributed",
    "FullyShardedDataParallel": "workbench.parallel.strategies.fsdp",
    "Launch": "workbench.parallel.launching.launcher",
    "LaunchEnv": "workbench.parallel.group.launch_env",
    "PipelineParallel": "workbench.parallel.strategies.pipeline",
    "STRATEGIES": "workbench.parallel.strategies.registry",
    "StepTimeline": "workbench.parallel.strategies.timeline",
    "StrategySpec": "workbench.parallel.strategies.registry",
    "TensorParallel": "workbench.parallel.strategies.tensor_parallel",
    "WorkerFailed": "workbench.parallel.launching.supervisor",
    "default_backend": "workbench.parallel.group.process_group",
    "detect_launch_env": "workbench.parallel.group.launch_env",
    "free_port": "workbench.parallel.launching.launcher",
    "join_process_group_from_env": "workbench.parallel.group.process_group",
    "launch": "workbench.parallel.launching.launcher",
    "leave_process_group": "workbench.parallel.group.process_group",
    "per_rank_batch_size": "workbench.parallel.strategies.data_parallel",
    "run_on_spark": "workbench.parallel.launching.spark",
    "strategy_spec": "workbench.parallel.strategies.registry",
    "under_a_launcher": "workbench.parallel.group.process_group",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
