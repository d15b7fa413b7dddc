"""Pipeline parallelism: the model's layers split into consecutive stages, one stage per rank.

A batch is cut into micro-batches that flow through the stages: while stage 1 works on micro-batch 0,
stage 0 already runs micro-batch 1. torch's engine (`torch.distributed.pipelining`: `PipelineStage` and
the `ScheduleGPipe` / `Schedule1F1B` schedules) sends activations forward and gradients back between the
ranks. GPipe runs every forward, then every backward; 1F1B alternates once the pipeline is full, so a stage
keeps at most (stages − its index) micro-batches' activations instead of all of them. Both leave the
stages idle part of the time: the *bubble*, (p − 1) / (m + p − 1) of the step for p stages and m
micro-batches of equal cost.

The model must be an ``nn.Sequential`` (every top-level child takes one tensor and returns one, like
`workbench.models.transformer_lm`); split points name the children where a new stage begins, or are
chosen to balance the stages' parameter counts.

    strategy = PipelineParallel(schedule="1f1b", microbatches=4)     # 2 ranks: 2 stages, balanced
    launch(train, 2, strategy=strategy, model=model, config=config)  # checked before any process starts
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from workbench._validate import check_choice, check_int
from workbench.parallel.strategies.distributed import DistributedStrategy, average_gradients
from workbench.parallel.strategies.pipeline_split import MicrobatchLoss, as_sequential, balanced_starts
from workbench.parallel.strategies.stage_timeline import StageTimeline
from workbench.train.compilation import refuse_compile
from workbench.train.config import TrainConfig
from workbench.train.objective import ModelInputs
from workbench.train.precision import Precision
from workbench.train.step_time import NO_CLOCK, Clock
from workbench.train.strategy import Batch, Objective, check_state_fits

SCHEDULES = ("gpipe", "1f1b")
_SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


class PipelineParallel(DistributedStrategy):
    """Each rank holds one stage (consecutive top-level layers) of an ``nn.Sequential`` model.

    Every rank reads the same batches; the first stage feeds the inputs, the last computes the loss, and
    the schedule moves activations and gradients between them. Each stage's optimizer updates its own
    layers; the gradient norm for clipping covers all stages.

    Args:
        split_points: names of the top-level children where stages 1, 2, ... begin (one fewer than the
            ranks), e.g. ``["block1"]``; None splits so the stages' parameter counts are balanced.
        schedule: ``"1f1b"`` (one forward, one backward in the steady state) or ``"gpipe"`` (all
            forwards, then all backwards).
        microbatches: micro-batches per batch; it must divide ``batch_size``, and 1F1B needs at least one
            per stage. A smaller last batch of an epoch uses the largest count ≤ this that divides it (with
            GPipe, if that is fewer than the stages).
        record_timeline: time every micro-batch's forward and backward on each stage; the Trainer sends
            the spans of each logged step as its ``timeline`` event field (see `workbench.train.events`).
        stages: pipeline stages; None: one per rank. Fewer (a divisor of the ranks): the ranks form ranks /
            stages replicas of the pipeline (adjacent ranks make one), each on its own shard of the data,
            their gradients averaged after backward: DDP × pipeline, ``--strategy ddp+pp``.
        sync_control: see `DistributedStrategy` (`launch` turns it on).

    Example:
        >>> from workbench import models
        >>> from workbench.train import TrainConfig
        >>> strategy = PipelineParallel(split_points=["3"], microbatches=4)
        >>> strategy.validate(models.mlp(64, 10, hidden=(32, 32)), TrainConfig(batch_size=64), world_size=2)
        >>> strategy.stage_names(models.mlp(64, 10, hidden=(32, 32)), 2)
        [['0', '1', '2'], ['3', '4', '5']]
    """

    name = "pipeline"

    def __init__(
        self,
        *,
        split_points: Sequence[str] | None = None,
        schedule: str = "1f1b",
        microbatches: int = 4,
        record_timeline: bool = True,
        stages: int | None = None,
        sync_control: bool = False,
    ) -> None:
        super().__init__(sync_control=sync_control)
        check_choice("schedule", schedule, SCHEDULES)
        self.stages_wanted = None if stages is None else check_int("stages", stages, minimum=1)
        self._pp_group: Any = None  # with replicas: this pipeline's ranks, and this stage's replicas
        self._dp_group: Any = None
        self.schedule = schedule
        self.microbatches = check_int("microbatches", microbatches, minimum=1)
        if split_points is not None and (
            isinstance(split_points, str) or not all(isinstance(p, str) for p in split_points)
        ):
            raise ValueError(
                f"split_points must be a list of layer names, e.g. ['block1'], got {split_points!r}"
            )
        self.split_points = None if split_points is None else list(split_points)
        self.record_timeline = record_timeline
        self._schedules: dict[tuple[int, bool], Any] = {}  # (micro-batches, training) → schedule
        self._loss = MicrobatchLoss()
        self._timeline = StageTimeline()

    # ------------------------------------------------------------------ checks and the split

    def validate(self, model: nn.Module | None, config: TrainConfig, world_size: int | None = None) -> None:
        """Raise ValueError if `model` cannot be split into `world_size` stages, or `config` does not fit.

        Checked: the model is an ``nn.Sequential`` with at least one layer per stage; split points name
        its layers, in order, one fewer than the ranks; micro-batches divide the batch, and 1F1B has one
        per stage at least; no fp16 (a GradScaler per stage would skip steps independently). Without a
        model, only what needs none.
        """
        ranks = self.world_size if world_size is None else world_size
        refuse_compile(config.compile, "PipelineParallel", "its stages run inside torch's pipeline schedule")
        stages = self.stages_wanted or ranks
        if ranks % stages:
            raise ValueError(
                f"stages={stages} does not divide the {ranks} ranks into replicas of the pipeline; "
                f"launch a multiple of {stages} ranks, or choose stages among the divisors of {ranks}"
            )
        if model is not None:
            self.stage_names(model, stages)
        elif self.split_points is not None and len(self.split_points) + 1 != stages:
            raise self._count_error(stages)  # without the model, only the count can be checked
        if config.batch_size % self.microbatches:
            raise ValueError(
                f"microbatches={self.microbatches} does not divide batch_size={config.batch_size}; use a "
                f"batch size that is a multiple of {self.microbatches}, or a divisor of {config.batch_size} "
                "as microbatches"
            )
        if self.schedule == "1f1b" and self.microbatches < stages:
            raise ValueError(
                f"schedule='1f1b' needs at least one micro-batch per stage: microbatches={self.microbatches} "
                f"< {stages} stages; use microbatches ≥ {stages} or schedule='gpipe'"
            )
        if config.precision == "fp16":
            raise ValueError(
                "precision='fp16' is not supported with pipeline parallel (each stage's GradScaler would "
                "skip steps on its own); use 'bf16' or 'fp32'"
            )

    def stage_names(self, model: nn.Module, stages: int) -> list[list[str]]:
        """The top-level layer names of each stage, from `split_points` or balanced by parameter count."""
        check_int("stages", stages, minimum=1)
        if not isinstance(model, nn.Sequential):
            raise ValueError(as_sequential(model))
        names = [name for name, _ in model.named_children()]
        if len(names) < stages:
            raise ValueError(
                f"the model has {len(names)} top-level layers, too few for {stages} stages (one per rank); "
                "use fewer ranks or a model with more layers"
            )
        if self.split_points is None:
            sizes = [sum(p.numel() for p in child.parameters()) for child in model.children()]
            starts = balanced_starts(sizes, stages)
        else:
            starts = self._split_starts(names, stages)
        bounds = [*starts, len(names)]
        return [names[bounds[i] : bounds[i + 1]] for i in range(stages)]

    def _split_starts(self, names: list[str], stages: int) -> list[int]:
        assert self.split_points is not None
        layers = ", ".join(names)
        for point in self.split_points:
            if point not in names:
                raise ValueError(
                    f"split point {point!r} names no layer of the model; its top-level layers are: {layers}"
                )
        if self.split_points and self.split_points[0] == names[0]:
            raise ValueError(
                f"split point {names[0]!r} is the first layer: a split point names the layer where a new "
                f"stage begins, so it cannot be the first; layers: {layers}"
            )
        starts = [0] + [names.index(point) for point in self.split_points]
        if any(b <= a for a, b in itertools.pairwise(starts)):
            raise ValueError(
                f"split_points={self.split_points} must name distinct layers in model order; layers: {layers}"
            )
        if len(starts) != stages:
            raise self._count_error(stages)
        return starts

    def _count_error(self, ranks: int) -> ValueError:
        stages = len(self.split_points or ()) + 1
        more = "more" if stages > ranks else "fewer"
        return ValueError(
            f"split_points={self.split_points} make {stages} stages, {more} than the {ranks} ranks; "
            f"pipeline parallel runs one stage per rank, so give {ranks - 1} split point(s)"
        )

    # ------------------------------------------------------------------ the strategy

    @property
    def stages(self) -> int:
        """Stages of one pipeline."""
        return self.stages_wanted or self.world_size

    @property
    def stage(self) -> int:
        """This rank's stage (adjacent ranks make a pipeline)."""
        return self.rank % self.stages

    @property
    def replica(self) -> int:
        """This rank's pipeline, among ranks / stages."""
        return self.rank // self.stages

    @property
    def data_rank(self) -> int:
        return self.replica  # every stage of a pipeline reads the same batches

    @property
    def data_world_size(self) -> int:
        return self.world_size // self.stages

    @property
    def reports_loss(self) -> bool:
        return self.stage == self.stages - 1  # the last stage computes the loss

    def wrap(self, model: nn.Module) -> nn.Module:
        """This rank's stage: its layers (same names as in `model`) in an ``nn.Sequential``; with replicas,
        the groups of a pipeline's ranks and of a stage's replicas (a 2-D mesh, "dp" × "pp")."""
        if self.data_world_size > 1 and self._pp_group is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape = (self.data_world_size, self.stages)
            mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=("dp", "pp"))
            self._pp_group, self._dp_group = mesh["pp"].get_group(), mesh["dp"].get_group()
        names = self.stage_names(model, self.stages)[self.stage]
        layers = dict(model.named_children())
        stage = nn.Sequential(OrderedDict((name, layers[name]) for name in names)).to(self.device)
        self.module = stage
        self._schedules.clear()
        if self.record_timeline:
            self._timeline.attach(stage)
        return stage

    def check_objective(self, objective: Objective) -> None:
        """A pipeline splits (inputs, target) batches into micro-batches and computes `loss_fn` on the
        last stage: it needs a loss_fn (no step_fn, no model that computes its own loss)."""
        if objective.loss_fn is None:
            raise ValueError(
                f"PipelineParallel needs loss_fn(outputs, target): the loss is computed on the last stage "
                f"from (inputs, target) batches, so {objective.source} cannot compute it. Give a loss_fn, or "
                "train this model with DataParallel, FullyShardedDataParallel or TensorParallel"
            )

    def forward_backward(
        self,
        model: nn.Module,
        group: list[Batch],
        objective: Objective,
        precision: Precision,
        scaler: Any,
        clock: Clock = NO_CLOCK,
    ) -> torch.Tensor | None:
        """One schedule step per micro-batch group element; returns the loss on the last stage.

        On a timed step the stage's forward and backward passes (from its timeline, when recorded) are
        forward and backward; the rest of the schedule (sending, receiving, waiting for the neighbours) is
        comm."""
        pairs = [(_one_input(x), y) for x, y in map(objective.pair, group)]
        samples = sum(len(x) for x, _ in pairs)
        loss_fn = objective.loss_fn
        losses: list[torch.Tensor] = []
        self._timeline.start_step()
        first_use = False  # a schedule's first step also runs torch's shape inference: not timed
        for x, y in pairs:
            first_use |= (len(x), True) not in self._schedules
            schedule, count = self._schedule(model, len(x), training=True)
            self._loss.use(loss_fn, 1 / samples)
            self._timeline.microbatches = count
            self._timeline.schedule = "GPipe" if type(schedule).__name__ == "ScheduleGPipe" else "1F1B"
            step_losses: list[torch.Tensor] = []  # the schedule clears the list it is given
            with precision.autocast():
                self._run(schedule, x, y, step_losses)
            losses.extend(step_losses)
        self._timeline.stop_step(keep=not first_use)
        clock.mark("forward")
        if clock.enabled:
            self._split_schedule_time(clock)
        if self._dp_group is not None:  # replicas: the step's gradients averaged over this stage's replicas
            average_gradients(model, self._dp_group, self.data_world_size)
            clock.mark("comm")
        if not losses:
            return None
        return torch.stack([loss.detach() for loss in losses]).sum()

    def _split_schedule_time(self, clock: Clock) -> None:
        """Split the schedule's time (counted as forward) into this stage's passes and the rest (comm)."""
        if not self.record_timeline:
            clock.explain(
                "pipeline: without record_timeline the schedule's time (passes, sends, waits) is forward"
            )
            return
        if not self._timeline.spans:  # the schedule's first use: its spans were dropped (see above)
            clock.explain(
                "pipeline: this step also ran torch's shape inference; its schedule's time is forward"
            )
            return
        busy = {
            kind: sum(end - start for k, _, start, end in self._timeline.spans if k == kind) for kind in "FB"
        }
        clock.move("forward", "comm", clock.seconds["forward"] - busy["F"] - busy["B"])
        clock.move("forward", "backward", busy["B"])

    def predict(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        """Forward only, through every stage (one micro-batch); the output on the last stage."""
        schedule, _ = self._schedule(model, len(_one_input(inputs)), training=False)
        return self._run(schedule, inputs, None, None)

    def total_norm(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """The whole model's gradient norm: each stage's squared norm, summed over the stages."""
        local = super().total_norm(grads).to(self.device, torch.float32)
        return (self.all_reduce(local.square(), "sum") / self.data_world_size).sqrt()  # replicas: equal

    def model_state(self, model: nn.Module) -> dict[str, Any] | None:
        """Every stage's parameters, gathered to rank 0 under the original model's names."""
        parts = self.gather_object({k: v.detach().cpu() for k, v in model.state_dict().items()})
        parts = parts[: self.stages]  # the first pipeline's stages (replicas hold the same)
        return {k: v for part in parts for k, v in part.items()} if self.is_main else None

    def load_model_state(self, model: nn.Module, state: dict[str, Any]) -> None:
        own = model.state_dict()
        check_state_fits(own, state, extra_keys_allowed=True)  # the other stages' keys are theirs
        model.load_state_dict({k: v for k, v in state.items() if k in own})

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Every stage's optimizer state, keyed by parameter name, merged on rank 0."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        parts = self.gather_object(get_optimizer_state_dict(model, optimizer))[: self.stages]
        if not self.is_main:
            return {}
        groups = [dict(group) for group in parts[0]["param_groups"]]
        for index, group in enumerate(groups):
            group["params"] = [name for part in parts for name in part["param_groups"][index]["params"]]
        return {"state": {k: v for part in parts for k, v in part["state"].items()}, "param_groups": groups}

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        own = {name for name, _ in model.named_parameters()}
        groups = [dict(g, params=[n for n in g["params"] if n in own]) for g in state["param_groups"]]
        mine = {"state": {k: v for k, v in state["state"].items() if k in own}, "param_groups": groups}
        set_optimizer_state_dict(model, optimizer, mine)

    def step_details(self) -> dict[str, Any]:
        """The ``timeline`` of the last step on this stage (when recorded)."""
        if not self.record_timeline or not self._timeline.spans or self.replica:
            return {}  # one pipeline's timeline: the first's
        return {
            "timeline": {
                "stage": self.stage,
                "stages": self.stages,
                "microbatches": self._timeline.microbatches,
                "schedule": self._timeline.schedule,
                "spans": [list(span) for span in self._timeline.spans],
            }
        }

    def summary(self) -> str:
        return f"pipeline ({_SCHEDULE_NAMES[self.schedule]}, {self.microbatches} micro-batches)"

    # ------------------------------------------------------------------ torch's engine

    def _schedule(self, stage_module: nn.Module, batch: int, training: bool) -> tuple[Any, int]:
        """The schedule for a batch of `batch` samples, and its number of micro-batches.

        Stages learn the tensors' shapes on their first step, so each micro-batch size gets its own
        `PipelineStage` (the smaller last batch of an epoch, evaluation batches).
        """
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # slow to import

        count = (
            max(d for d in range(1, min(self.microbatches, batch) + 1) if batch % d == 0) if training else 1
        )
        key = (batch, training)
        if key not in self._schedules:
            stage = PipelineStage(stage_module, self.stage, self.stages, self.device, group=self._pp_group)
            if training:
                one_f_one_b = self.schedule == "1f1b" and count >= self.stages  # else: too few
                kind = Schedule1F1B if one_f_one_b else ScheduleGPipe
                schedule = kind(stage, count, loss_fn=self._loss, scale_grads=False)  # _loss weighs them
            else:
                schedule = ScheduleGPipe(stage, 1)  # no loss: forward only
            self._schedules[key] = (schedule, count)
        return self._schedules[key]

    def _run(self, schedule: Any, x: torch.Tensor, y: torch.Tensor | None, losses: list | None) -> Any:
        first, last = self.stage == 0, self.stage == self.stages - 1
        args = (x.to(self.device, non_blocking=True),) if first else ()
        kwargs: dict[str, Any] = {}
        if last and y is not None:
            kwargs = {"target": y.to(self.device, non_blocking=True), "losses": losses}
        return schedule.step(*args, **kwargs)


def _one_input(inputs: Any) -> torch.Tensor:
    """`inputs` when it is one tensor; ValueError for a batch of several inputs, which a pipeline cannot
    send through its stages."""
    if isinstance(inputs, ModelInputs):
        raise ValueError(
            f"PipelineParallel sends one input tensor through its stages, but these batches hold "
            f"{len(inputs)} inputs before the target ((x1, x2, ..., target)); stack them into one tensor, or "
            "train this model with DataParallel, FullyShardedDataParallel or TensorParallel"
        )
    return inputs
