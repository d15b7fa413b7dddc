"""Where training runs, as the `Trainer` sees it: the `Strategy` protocol, `StrategyBase` (one process's
way of doing each part) and `SingleDevice`. The distributed strategies (DDP, FSDP, pipeline and tensor
parallel) live in the `parallel` package and extend `StrategyBase`; this module knows nothing of
``torch.distributed``.

A strategy tells the loop the device, this process's rank and the world size, which shard of the data it
trains on, how to wrap the model, one step's forward and backward, the gradient norm, whole-model state
dicts, and the few collectives the loop needs (all-reduce, syncing control requests, gathering objects).

    trainer = Trainer(model, loss_fn, splits, config)                          # one device
    trainer = Trainer(model, loss_fn, splits, config, strategy=DataParallel())  # inside launch/torchrun
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import torch

from workbench._validate import check_choice
from workbench.data import move_batch
from workbench.train import gradients
from workbench.train.choices import DEVICES
from workbench.train.config import TrainConfig
from workbench.train.control import Changes
from workbench.train.objective import LossFn, Objective, forward
from workbench.train.precision import Precision
from workbench.train.step_time import NO_CLOCK, Clock

REDUCE_OPS = ("sum", "mean", "max")
Batch = Any  # (inputs, target), a dict, or any nesting of tensors (workbench.data.batch)
__all__ = ["Batch", "LossFn", "Objective", "SingleDevice", "Strategy", "StrategyBase"]


class Strategy(Protocol):
    """What the training loop needs from "where it runs".

    `StrategyBase` implements every method for one process; the distributed strategies
    (the `parallel` package) override the parts they change. Only they know about ``torch.distributed``.

    Example (what the loop reads of one, here `SingleDevice`'s):
        >>> strategy = SingleDevice("cpu")
        >>> strategy.rank, strategy.world_size, strategy.device, strategy.signalled_by_launcher
        (0, 1, device(type='cpu'), False)
        >>> strategy.data_rank, strategy.data_world_size, strategy.gather_object("mine")
        (0, 1, ['mine'])
    """

    rank: int
    world_size: int
    device: torch.device
    # a rank whose launcher (torchrun, srun, mpirun) signals every rank itself: the first SIGTERM or SIGINT
    # stops the ranks together at the next logged step, saved (`from_env` sets it)
    signalled_by_launcher: bool

    @property
    def is_main(self) -> bool: ...

    @property
    def data_rank(self) -> int: ...  # which shard of every batch this rank trains on

    @property
    def data_world_size(self) -> int: ...  # how many shards (1: every rank sees the same batch)

    @property
    def reports_loss(self) -> bool: ...  # this rank reports a loss of its own (not a copy of another's)

    def bind(self) -> None: ...

    def validate(
        self, model: torch.nn.Module, config: TrainConfig, world_size: int | None = None
    ) -> None: ...

    def check_objective(self, objective: Objective) -> None: ...

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def forward_backward(
        self,
        model: torch.nn.Module,
        group: list[Batch],
        objective: Objective,
        precision: Precision,
        scaler: Any,
        clock: Clock = NO_CLOCK,
    ) -> torch.Tensor | None: ...

    def to_device(self, batch: Batch) -> Batch: ...

    def predict(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor | None: ...

    def eval_forward_passes(self, local_batches: int) -> int: ...

    def total_norm(self, grads: list[torch.Tensor]) -> torch.Tensor: ...

    def model_state(self, model: torch.nn.Module) -> dict[str, Any] | None: ...

    def load_model_state(self, model: torch.nn.Module, state: dict[str, Any]) -> None: ...

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]: ...

    def load_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None: ...

    def step_details(self) -> dict[str, Any]: ...

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor: ...

    def gather_object(self, value: Any) -> list[Any]: ...

    def sync_requests(self, changes: Changes, stop: bool) -> tuple[Changes, bool]: ...

    def describe(self) -> str: ...


class StrategyBase:
    """One process's way of training, which the distributed strategies extend: a plain forward and
    backward per micro-batch, the model's own state dicts, torch's gradient norm.

    Example (a strategy of your own: one device, with a figure of its own in every logged step):
        >>> import torch.nn.functional as F
        >>> from torch.utils.data import TensorDataset
        >>> from workbench.train import TrainConfig, Trainer
        >>> class CpuThreads(StrategyBase):
        ...     device = torch.device("cpu")
        ...     def describe(self):
        ...         return f"1 process on cpu, {torch.get_num_threads()} threads"
        ...     def step_details(self):
        ...         return {"threads": torch.get_num_threads()}
        >>> class Threads:
        ...     seen = set()
        ...     def on_step(self, event):
        ...         self.seen.add(event["threads"])
        >>> data = TensorDataset(torch.randn(64, 3), torch.arange(64) % 2)
        >>> _ = Trainer(torch.nn.Linear(3, 2), F.cross_entropy, data, TrainConfig(epochs=1, batch_size=16),
        ...             strategy=CpuThreads(), callbacks=[Threads()], progress=False).fit()
        >>> Threads.seen == {torch.get_num_threads()}
        True
    """

    rank = 0
    world_size = 1
    device: torch.device
    signalled_by_launcher = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def data_rank(self) -> int:
        return self.rank

    @property
    def data_world_size(self) -> int:
        return self.world_size

    @property
    def reports_loss(self) -> bool:
        """True where this rank's loss is its own data's: False where it computes none (a pipeline stage
        before the last) or a copy of another rank's (tensor parallel ranks but 0)."""
        return True

    def bind(self) -> None:
        """Join the process group, where there is one to join (nothing to do in one process)."""

    def validate(self, model: torch.nn.Module, config: TrainConfig, world_size: int | None = None) -> None:
        """Raise ValueError if `model` and `config` cannot train this way on `world_size` ranks."""

    def check_objective(self, objective: Objective) -> None:
        """Raise ValueError if this strategy cannot compute the loss the way `objective` says."""

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` (or this rank's part of it) on `device`: the module to train, whose parameters the
        optimizer updates."""
        return model.to(self.device)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module behind `wrap`'s result."""
        return model

    def no_sync(self, model: torch.nn.Module, active: bool) -> contextlib.AbstractContextManager:
        """A context in which backward skips the gradient synchronisation (while `active`)."""
        return contextlib.nullcontext()

    def forward_backward(
        self,
        model: torch.nn.Module,
        group: list[Batch],
        objective: Objective,
        precision: Precision,
        scaler: Any,
        clock: Clock = NO_CLOCK,
    ) -> torch.Tensor | None:
        """Forward and backward over the micro-batches of one optimizer step; returns their mean loss
        (detached), or None on a rank that computes no loss. Gradients are synchronised once, on the last.
        `clock` times the copy, forward and backward phases (`workbench.train.step_time`)."""
        sizes = [objective.samples(batch) for batch in group]
        samples = sum(sizes)
        step_loss = None
        for index, batch in enumerate(group):
            batch = self.to_device(batch)
            clock.mark("copy")
            with self.no_sync(model, index < len(group) - 1):
                with precision.autocast():
                    loss, _ = objective(model, batch)
                if len(group) > 1:  # mean over the whole group, as one batch of all its samples would give
                    loss = loss * (sizes[index] / samples)
                clock.mark("forward")
                self.backward(scaler.scale(loss) if scaler is not None else loss, clock)
            step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        return step_loss

    def backward(self, loss: torch.Tensor, clock: Clock) -> None:
        """``loss.backward()``, timed as the backward phase (strategies that communicate inside it split
        that time)."""
        loss.backward()
        clock.mark("backward")

    def to_device(self, batch: Batch) -> Batch:
        """`batch` with its tensors on this rank's device (asynchronously where the host memory is pinned)."""
        if type(batch) is tuple and len(batch) == 2:  # the in-memory fast path: (x, y) tensors
            x, y = batch
            if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        return move_batch(batch, self.device, non_blocking=True)

    def predict(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor | None:
        """The model's output for `inputs` (evaluation; several are `ModelInputs`), or None on a rank that
        has none."""
        return forward(model, inputs)

    def eval_forward_passes(self, local_batches: int) -> int:
        """How many forward passes this rank makes to evaluate its `local_batches` batches (more when
        every rank must take part in every forward, e.g. FSDP gathering parameters)."""
        return local_batches

    def total_norm(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """The L2 norm of the whole model's gradient."""
        return gradients.total_norm(grads)

    def model_state(self, model: torch.nn.Module) -> dict[str, Any] | None:
        """The whole model's state dict on rank 0 (for checkpoints and results); every rank calls it."""
        return self.unwrap(model).state_dict()

    def load_model_state(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        """Load a whole-model state dict (as `model_state` gives) into this rank's part of the model; the
        model is left untouched when the state does not fit it (torch would copy the tensors that fit)."""
        check_state_fits(self.unwrap(model).state_dict(), state)
        self.unwrap(model).load_state_dict(state)

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state dict for a checkpoint; every rank calls it."""
        return optimizer.state_dict()

    def load_optimizer_state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        """Load what `optimizer_state` gave."""
        optimizer.load_state_dict(state)

    def step_details(self) -> dict[str, Any]:
        """Extra fields for the event of the last step (a pipeline's timeline)."""
        return {}

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum, average or maximum of `tensor` over all ranks, in place; returns it."""
        check_choice("op", op, REDUCE_OPS)
        return tensor

    def gather_object(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order."""
        return [value]

    def sync_requests(self, changes: Changes, stop: bool) -> tuple[Changes, bool]:
        """The control requests every rank acts on (in one process: this one's)."""
        return changes, stop


def check_state_fits(own: dict[str, Any], state: dict[str, Any], *, extra_keys_allowed: bool = False) -> None:
    """RuntimeError, in load_state_dict's words, unless `state` has every key of `own` at its shape (and no
    other key, unless `extra_keys_allowed`): checked before anything is copied into the model."""
    missing = [key for key in own if key not in state]
    unexpected = [] if extra_keys_allowed else [key for key in state if key not in own]
    shapes = [
        f"size mismatch for {key}: copying a param with shape {tuple(state[key].shape)} from checkpoint, the "
        f"shape in current model is {tuple(own[key].shape)}."
        for key in own
        if key in state and hasattr(state[key], "shape") and tuple(state[key].shape) != tuple(own[key].shape)
    ]
    problems = [f"Missing key(s) in state_dict: {', '.join(map(repr, missing))}."] if missing else []
    problems += (
        [f"Unexpected key(s) in state_dict: {', '.join(map(repr, unexpected))}."] if unexpected else []
    )
    if problems or shapes:
        raise RuntimeError("Error(s) in loading state_dict:\n\t" + "\n\t".join([*problems, *shapes]))


class SingleDevice(StrategyBase):
    """Train in this process on one device: ``"auto"`` (GPU if torch sees one), ``"cpu"`` or ``"cuda"``.

    Example:
        >>> strategy = SingleDevice("cpu")
        >>> strategy.rank, strategy.world_size, strategy.is_main, strategy.describe()
        (0, 1, True, '1 process on cpu')
    """

    def __init__(self, device: str | torch.device = "auto") -> None:
        self.device = _resolve_device(device)

    def describe(self) -> str:
        return f"1 process on {self.device}"


def _resolve_device(name: str | torch.device) -> torch.device:
    if isinstance(name, torch.device):
        return name
    check_choice("device", name, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device here; use device='auto' or 'cpu'")
    return torch.device(name)
