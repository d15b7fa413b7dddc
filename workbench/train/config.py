"""Training settings: two small frozen dataclasses, validated when built.

`OptimizerConfig` says how parameters move (optimizer, learning rate and its schedule); `TrainConfig` says
how the loop runs (epochs, batch size, precision, clipping, accumulation, seed, logging). Both raise
ValueError naming the bad field and what it accepts, and TypeError for an argument they lack, saying where it
lives (``TrainConfig(lr=0.1)``: in OptimizerConfig) or what was meant (``learning_rate``: ``lr``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from workbench._validate import check_choice, check_int, check_number, naming_unknown_arguments
from workbench.data import LoaderConfig
from workbench.train.activation_checkpointing import module_names
from workbench.train.choices import COMPILE_MODES, DEVICES, OPTIMIZERS, PRECISIONS, SCHEDULES

MAX_LR = 1e3  # a learning rate above this is a typo (1e3 vs 1e-3), not a setting
MAX_BATCH_SIZE = 2**31 - 1  # torch indexes a batch with int32 in places
MAX_SEED = 2**32 - 1  # numpy and CUDA generators take 32-bit seeds


@dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer and learning-rate schedule.

    Args:
        name: ``"sgd"``, ``"adam"`` or ``"adamw"`` (torch.optim); `Trainer` also accepts a factory for others.
        lr: peak learning rate, > 0.
        momentum, nesterov: SGD only (Nesterov needs momentum > 0).
        weight_decay: L2 penalty (SGD, Adam) or decoupled decay (AdamW), ≥ 0.
        betas: Adam/AdamW moment decay rates, each in [0, 1).
        schedule: ``"constant"``, ``"cosine"`` (to 0 at the last step) or ``"linear"`` (to 0).
        warmup_steps: steps of linear warm-up from 0 before the schedule, ≥ 0.

    Example:
        >>> OptimizerConfig("sgd", lr=0.1, momentum=0.9).name
        'sgd'
        >>> OptimizerConfig("sgd", lr=0)
        Traceback (most recent call last):
        ...
        ValueError: lr must be a finite number > 0 and ≤ 1000, got 0
    """

    name: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "constant"
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        check_choice("name", self.name, OPTIMIZERS)
        check_lr(self.lr)
        check_number("momentum", self.momentum, at_least=0, below=1)
        check_number("weight_decay", self.weight_decay, at_least=0)
        if not isinstance(self.nesterov, bool):
            raise ValueError(f"nesterov must be True or False, got {self.nesterov!r}")
        if self.nesterov and not (self.name == "sgd" and self.momentum > 0):
            raise ValueError("nesterov=True needs name='sgd' and momentum > 0")
        if self.name != "sgd" and self.momentum:
            raise ValueError(f"momentum applies to name='sgd' only (got name={self.name!r}); use betas")
        if not (isinstance(self.betas, tuple | list) and len(self.betas) == 2):
            raise ValueError(f"betas must be a pair (beta1, beta2), got {self.betas!r}")
        for i, beta in enumerate(self.betas):
            check_number(f"betas[{i}]", beta, at_least=0, below=1)
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        check_choice("schedule", self.schedule, SCHEDULES)
        check_int("warmup_steps", self.warmup_steps, minimum=0)


@dataclass(frozen=True, repr=False)
class EarlyStopping:
    """Stop a fit when a val metric has stopped improving, and end it with the best evaluation's weights.

    Val is evaluated after each epoch (and every ``TrainConfig.eval_every_steps``); each evaluation is judged,
    as Lightning's and Hugging Face's early stopping judge them.

    Args:
        metric: the val metric watched: ``"loss"``, ``"accuracy"`` (classification) or a name of the
            Trainer's ``metrics=``.
        patience: val evaluations in a row without an improvement before the fit stops (epochs, unless
            ``eval_every_steps`` evaluates within them), ≥ 1.
        min_delta: by how much a value must beat the best one to count as an improvement, ≥ 0.
        mode: ``"min"`` (lower is better) or ``"max"``; None: ``"min"`` for the loss, ``"max"`` for accuracy
            and `F1`, a torchmetrics metric's own ``higher_is_better``; a function of yours must say.
        restore_best: end the fit with the best evaluation's weights (the test split then judges them, and
            a named run keeps them in ``best.pt``); False: with the last ones.

    Example:
        >>> TrainConfig(epochs=100, early_stopping=EarlyStopping("accuracy", patience=5)).early_stopping
        EarlyStopping('accuracy', patience=5)
        >>> EarlyStopping(patience=0)
        Traceback (most recent call last):
        ...
        ValueError: patience must be an integer ≥ 1, got 0
    """

    metric: str = "loss"
    patience: int = 3
    min_delta: float = 0.0
    mode: str | None = None
    restore_best: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must be the name of a val metric such as 'loss', got {self.metric!r}")
        for prefix in ("val_", "val/", "valid_", "validation_", "eval_"):
            if self.metric.startswith(prefix) and len(self.metric) > len(prefix):
                raise ValueError(
                    f"metric={self.metric!r}: the val split is the one watched, and its metrics go by their "
                    f"own names; write metric={self.metric[len(prefix) :]!r}"
                )
        check_int("patience", self.patience, minimum=1)
        check_number("min_delta", self.min_delta, at_least=0)
        if self.mode is not None:
            check_choice("mode", self.mode, ("min", "max"))
        if not isinstance(self.restore_best, bool):
            raise ValueError(f"restore_best must be True or False, got {self.restore_best!r}")

    def __repr__(self) -> str:
        """The metric and the settings that differ from the defaults, as one would write them."""
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)[1:]
            if getattr(self, f.name) != f.default
        ]
        return f"EarlyStopping({', '.join([repr(self.metric), *changed])})"


@dataclass(frozen=True)
class TrainConfig:
    """How the loop runs.

    Args:
        epochs: passes over the training split, ≥ 1 (unless `max_steps` is given).
        batch_size: samples per forward pass (micro-batch), ≥ 1.
        optimizer: an `OptimizerConfig`.
        precision: ``"fp32"``, ``"bf16"`` (autocast; CPU or a GPU with bf16) or ``"fp16"`` (autocast with
            GradScaler; GPU only).
        clip_norm: clip gradients to this global L2 norm; 0 = off.
        clip_value: clip each gradient element to ±value; 0 = off.
        accumulate: micro-batches per optimizer step (gradient accumulation), ≥ 1.
        seed: seeds torch and the data order; the same seed gives the same run on CPU.
        log_every: publish train metrics every this many optimizer steps (and at each epoch's end), ≥ 1.
            The loss is averaged over those steps; the gradient norm (a pass over every gradient) and the
            non-finite-loss check run on those steps only, so 1 costs a few percent on small models.
        checkpoint_every: save a checkpoint every this many epochs (when the trainer has a run
            directory), ≥ 1.
        checkpoint_every_steps: save one also every this many optimizer steps within an epoch (a run
            directory's), so a failure in a long epoch or a stream loses at most that many steps, ≥ 1;
            None: at the epochs' ends only.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"`` or ``"cuda"``.
        loader: a `LoaderConfig` (workers, pinning, collate_fn...) for torch datasets; the in-memory
            workbench datasets ignore it.
        time_breakdown: time each logged step's phases (data, copy, forward, backward, comm, optimizer,
            other) and publish them as its ``step_time`` (see `workbench.train.step_time`); on a GPU each
            phase boundary of a logged step waits for the device.
        profile_steps: ``(first, last)``: record a torch.profiler trace of these optimizer steps (1-based,
            inclusive) on every rank into the run directory's ``profile/`` (see `workbench.train.profiling`);
            None: no profiling.
        compile: ``"off"``, or a torch.compile mode (``"default"``, ``"reduce-overhead"``, ``"max-autotune"``,
            ``"max-autotune-no-cudagraphs"``) for the module the training steps run; its compile time is
            reported apart from the steps (see `workbench.train.compilation`). Single device and
            `DataParallel` only.
        early_stopping: an `EarlyStopping`: stop when a val metric has stopped improving, and end with the
            best epoch's weights; None: train every epoch.
        eval_every_steps: evaluate val also every this many optimizer steps within an epoch (for the plots
            and logs of a long epoch, and for early stopping, which judges every evaluation; a
            ReduceLROnPlateau judges them with ``LrScheduler(..., every="eval")``), ≥ 1;
            None: at each epoch's end only.
        max_steps: train for this many optimizer steps in all, in `epochs`' place (as Hugging Face's
            ``max_steps`` overrides ``num_train_epochs``): through the training split as many times as that
            takes, ending inside an epoch if it falls there (val is evaluated and a checkpoint saved there);
            for streaming data (an IterableDataset without an end) and runs counted in steps, ≥ 1; None: the
            fit is `epochs` long.
        ema_decay: keep an exponential moving average of the weights with this decay (0.999: about the
            last 1000 steps), which val and test evaluate and the model holds when the fit ends (see
            `workbench.train.weight_average`), in (0, 1); None: the trained weights, unaveraged.
        activation_checkpointing: recompute modules' activations in backward instead of keeping them
            (`workbench.train.activation_checkpointing`): ``"blocks"`` (the model's repeated blocks) or the
            module classes to recompute (classes, their names, or names joined by commas; kept as a tuple of
            names); None: keep every activation.

    Example:
        >>> TrainConfig(epochs=3, optimizer=OptimizerConfig("adamw", lr=3e-4), precision="bf16").epochs
        3
        >>> TrainConfig(precision="fp8")
        Traceback (most recent call last):
        ...
        ValueError: precision='fp8' is not supported; allowed values: 'fp32', 'bf16', 'fp16'
        >>> TrainConfig(lr=0.1)
        Traceback (most recent call last):
        ...
        TypeError: TrainConfig() takes no argument lr: lr is in OptimizerConfig; write optimizer=...
    """

    epochs: int = 10
    batch_size: int = 64
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    precision: str = "fp32"
    clip_norm: float = 0.0
    clip_value: float = 0.0
    accumulate: int = 1
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 1
    device: str = "auto"
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    time_breakdown: bool = True
    profile_steps: tuple[int, int] | None = None
    compile: str = "off"
    early_stopping: EarlyStopping | None = None
    eval_every_steps: int | None = None
    max_steps: int | None = None
    checkpoint_every_steps: int | None = None
    ema_decay: float | None = None
    activation_checkpointing: str | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1, maximum=MAX_BATCH_SIZE)
        if not isinstance(self.optimizer, OptimizerConfig):
            raise ValueError(_optimizer_fix(self.optimizer))
        check_choice("precision", self.precision, PRECISIONS, PEERS_PRECISIONS)
        check_number("clip_norm", self.clip_norm, at_least=0)
        check_number("clip_value", self.clip_value, at_least=0)
        check_int("accumulate", self.accumulate, minimum=1)
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_int("log_every", self.log_every, minimum=1)
        check_int("checkpoint_every", self.checkpoint_every, minimum=1)
        if self.eval_every_steps is not None:
            check_int("eval_every_steps", self.eval_every_steps, minimum=1)
        if self.max_steps == -1 and not isinstance(self.max_steps, bool):
            raise ValueError(
                "max_steps=-1 is 'no limit' to Hugging Face and Lightning; here that is max_steps=None (the "
                "default): the fit is epochs long"
            )
        if self.max_steps is not None:
            check_int("max_steps", self.max_steps, minimum=1)
        if self.checkpoint_every_steps is not None:
            check_int("checkpoint_every_steps", self.checkpoint_every_steps, minimum=1)
        check_choice("device", self.device, DEVICES)
        if self.ema_decay is not None:
            check_number("ema_decay", self.ema_decay, above=0, below=1)
        if self.profile_steps is not None:
            _check_profile_steps(self.profile_steps)
        if self.activation_checkpointing is not None:
            object.__setattr__(self, "activation_checkpointing", module_names(self.activation_checkpointing))
        if isinstance(self.compile, bool):
            raise ValueError(
                f"compile must be a mode name, got {self.compile!r}; use compile='default' to compile "
                f"(or one of {', '.join(map(repr, COMPILE_MODES[2:]))}) and compile='off' not to"
            )
        check_choice("compile", self.compile, COMPILE_MODES)
        if not isinstance(self.time_breakdown, bool):
            raise ValueError(f"time_breakdown must be True or False, got {self.time_breakdown!r}")
        if not isinstance(self.loader, LoaderConfig):
            raise ValueError(
                f"loader must be a LoaderConfig (from workbench.data), got {type(self.loader).__name__}"
            )
        if self.early_stopping is not None and not isinstance(self.early_stopping, EarlyStopping):
            got = self.early_stopping
            shown = f"the number {got!r}" if isinstance(got, int | float) else type(got).__name__
            whole = isinstance(got, int) and not isinstance(got, bool)
            patience = f"patience={got!r}" if whole else "patience=3"
            raise ValueError(
                f"early_stopping must be an EarlyStopping (from workbench.train) or None, got {shown}; write "
                f"early_stopping=EarlyStopping('loss', {patience})"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for JSON logs and checkpoints); a collate_fn appears by its name."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["optimizer"] = dataclasses.asdict(self.optimizer)
        data["loader"] = self.loader.to_dict()
        if self.early_stopping is not None:
            data["early_stopping"] = dataclasses.asdict(self.early_stopping)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of `to_dict`; ValueError naming any field this version does not know.

        Example:
            >>> TrainConfig.from_dict({"epochs": 3, "colour": "red"})
            Traceback (most recent call last):
            ...
            ValueError: the config has a field this version of workbench does not know: colour ...
        """
        if not isinstance(data, dict):
            raise ValueError(f"a config must be a JSON object of fields, got {type(data).__name__}")
        data = dict(data)
        optimizer = dict(data.pop("optimizer", {}))
        loader = dict(data.pop("loader", {}))
        stopping = data.pop("early_stopping", None)
        unknown = [
            *(name for name in data if name not in _fields(cls)),
            *(f"optimizer.{name}" for name in optimizer if name not in _fields(OptimizerConfig)),
            *(f"loader.{name}" for name in loader if name not in _fields(LoaderConfig)),
            *(f"early_stopping.{name}" for name in stopping or {} if name not in _fields(EarlyStopping)),
        ]
        if unknown:
            several = len(unknown) > 1
            raise ValueError(
                f"the config has {'fields' if several else 'a field'} this version of workbench does not "
                f"know: {', '.join(unknown)} (written by another version, or by hand); remove "
                f"{'them' if several else 'it'}, or use the workbench version that wrote it"
            )
        if "betas" in optimizer:
            optimizer["betas"] = tuple(optimizer["betas"])
        loader["collate_fn"] = None  # a function is logged by name only; give it again in code
        if data.get("profile_steps") is not None:  # JSON holds the pair as a list
            data["profile_steps"] = tuple(data["profile_steps"])
        if stopping is not None:
            data["early_stopping"] = EarlyStopping(**stopping)
        return cls(optimizer=OptimizerConfig(**optimizer), loader=LoaderConfig(**loader), **data)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with `changes`; ``optimizer`` changes may be a dict of OptimizerConfig fields."""
        if isinstance(changes.get("optimizer"), dict):
            changes["optimizer"] = dataclasses.replace(self.optimizer, **changes["optimizer"])
        return dataclasses.replace(self, **changes)


# What Hugging Face's TrainingArguments, Lightning's Trainer and common scripts call our fields
PEERS_NAMES = {
    "learning_rate": "lr",
    "num_epochs": "epochs",
    "max_epochs": "epochs",
    "num_train_epochs": "epochs",
    "per_device_train_batch_size": "batch_size",
    "gradient_accumulation_steps": "accumulate",
    "accumulate_grad_batches": "accumulate",
    "max_grad_norm": "clip_norm",
    "gradient_clip_val": "clip_norm",
    "mixed_precision": "precision",
    "eval_steps": "eval_every_steps",
    "val_check_interval": "eval_every_steps",
    "num_training_steps": "max_steps",
    "save_steps": "checkpoint_every_steps",
    "every_n_train_steps": "checkpoint_every_steps",
    "total_steps": "max_steps",
    "model_ema_decay": "ema_decay",
    "train_steps": "max_steps",
}
# Lightning's and Accelerate's names for our precisions (autocast ones: "bf16-true" casts the weights)
PEERS_PRECISIONS: dict[object, str] = {
    "bf16-mixed": "bf16", "bfloat16": "bf16",
    "16-mixed": "fp16", "16": "fp16", 16: "fp16", "float16": "fp16",
    "32-true": "fp32", "32": "fp32", 32: "fp32", "no": "fp32", "float32": "fp32",
}  # fmt: skip
naming_unknown_arguments(
    TrainConfig,
    {"optimizer": OptimizerConfig, "loader": LoaderConfig, "early_stopping": EarlyStopping},
    PEERS_NAMES,
)
# Lightning's and Keras' EarlyStopping arguments, Hugging Face's EarlyStoppingCallback's
naming_unknown_arguments(
    EarlyStopping,
    {"": TrainConfig},
    {"monitor": "metric", "restore_best_weights": "restore_best", "early_stopping_patience": "patience"},
)
naming_unknown_arguments(OptimizerConfig, {"": TrainConfig}, PEERS_NAMES)


def check_lr(lr: object) -> None:
    """ValueError unless `lr` is a learning rate workbench accepts: finite, > 0 and ≤ `MAX_LR`."""
    check_number("lr", lr, above=0, at_most=MAX_LR)


def _fields(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _optimizer_fix(optimizer: object) -> str:
    """Why `optimizer` is not an OptimizerConfig, and what to write instead."""
    got = f"the class {optimizer.__name__}" if isinstance(optimizer, type) else type(optimizer).__name__
    said = f"optimizer must be an OptimizerConfig, got {got}"
    if isinstance(optimizer, str):
        said += f" {optimizer!r}"
        if optimizer.lower() in OPTIMIZERS:
            return f"{said}: write optimizer=OptimizerConfig({optimizer.lower()!r})"
    name = optimizer.__name__ if isinstance(optimizer, type) else type(optimizer).__name__
    if name.lower() in OPTIMIZERS and getattr(optimizer, "__module__", "").startswith("torch.optim"):
        lr = getattr(optimizer, "defaults", {}).get("lr") if not isinstance(optimizer, type) else None
        settings = f", lr={lr!r}" if isinstance(lr, float) else ""
        mine = f"OptimizerConfig({name.lower()!r}{settings})"
        return f"{said}: torch's {name} is one of the Trainer's own; write optimizer={mine}"
    mine = f"torch.optim.{name}" if getattr(optimizer, "__module__", "").startswith("torch.optim") else ""
    return (
        f"{said}: OptimizerConfig names one of {', '.join(OPTIMIZERS)} (e.g. OptimizerConfig('adam', "
        f"lr=1e-3)); for {mine or 'another optimizer'}, give the Trainer optimizer_factory=lambda params, "
        f"cfg: {mine or 'torch.optim.RMSprop'}(params, lr=cfg.lr)"
    )


def _check_profile_steps(steps: object) -> None:
    ok = isinstance(steps, tuple) and len(steps) == 2
    ok = (
        ok
        and all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
        and 1 <= steps[0] <= steps[1]
    )
    if not ok:
        raise ValueError(
            f"profile_steps must be a pair (first, last) of optimizer steps with 1 ≤ first ≤ last, got "
            f"{steps!r}; e.g. profile_steps=(5, 7) traces steps 5, 6 and 7"
        )
