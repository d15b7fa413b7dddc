"""Distributed training: strategies over a ``torch.distributed`` process group, and launching their
processes from a notebook cell or under torchrun.

- `DataParallel` (DDP), `FullyShardedDataParallel` (FSDP2), `PipelineParallel` (GPipe/1F1B) and
  `TensorParallel`, all built on `DistributedStrategy`; pass one to ``Trainer(..., strategy=...)``.
- `launch(fn, nprocs)` / `Launch`: fork N workers from a notebook, stream their events to your callbacks
  (a `Dashboard`), forward its controls, return rank 0's result. Under torchrun: ``Strategy.from_env()``.
- `STRATEGIES` / `strategy_spec`: the registered names ("ddp", "fsdp", ...) and how each splits the work.

Names are imported on first use, so ``workbench.parallel.registry`` needs neither torch nor
``torch.distributed``.

    >>> from workbench.parallel import launch
    >>> launch(lambda strategy: strategy.world_size, nprocs=2, verbose=False)
    2
"""

from __future__ import annotations

from workbench._lazy import lazy_attributes

_HOMES = {
    "DataParallel": "workbench.parallel.data_parallel",
    "DistributedStrategy": "workbench.parallel.distributed",
    "FullyShardedDataParallel": "workbench.parallel.fsdp",
    "Launch": "workbench.parallel.launcher",
    "LaunchEnv": "workbench.parallel.launch_env",
    "PipelineParallel": "workbench.parallel.pipeline",
    "STRATEGIES": "workbench.parallel.registry",
    "StepTimeline": "workbench.parallel.timeline",
    "StrategySpec": "workbench.parallel.registry",
    "TensorParallel": "workbench.parallel.tensor_parallel",
    "WorkerFailed": "workbench.parallel.launcher",
    "default_backend": "workbench.parallel.process_group",
    "detect_launch_env": "workbench.parallel.launch_env",
    "free_port": "workbench.parallel.launcher",
    "join_process_group_from_env": "workbench.parallel.process_group",
    "launch": "workbench.parallel.launcher",
    "leave_process_group": "workbench.parallel.process_group",
    "per_rank_batch_size": "workbench.parallel.data_parallel",
    "run_on_spark": "workbench.parallel.spark",
    "strategy_spec": "workbench.parallel.registry",
    "under_a_launcher": "workbench.parallel.process_group",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES)
