"""The Trainer against its peers: one model, data and seed through a hand-written loop, workbench's Trainer,
Lightning, Fabric and Accelerate.

    workbench bench trainer --peers        # the `peers` extra: pip install 'gpu-training-workbench[peers]'
    workbench bench trainer --peers --repeats 7 --epochs 3
    workbench bench trainer --peers --device cuda   # on a GPU: every loop with torch's fused Adam there

Every variant trains `bench_model` (MLP 3072-512-512-10, Adam 1e-3) on the same synthetic images as
`workbench bench trainer`, given as torch ``TensorDataset``\\s batched by a ``DataLoader`` (128, shuffled),
and evaluates the validation split after each epoch, on `device` (CPU unless told), in this process; on CUDA
every loop steps torch's fused Adam, as the Trainer does there. Each peer is set up the way its
documentation shows, with what would add work beyond the loop turned off (Lightning: no progress bar,
logger, checkpoints, model summary or sanity check). A warm-up run of each comes first (imports, first-call
costs); then the variants alternate, `repeats` times; each repeat's ratio to the hand-written loop of the
same repeat gives the median and range printed. A peer that is not installed is skipped with a message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from workbench._validate import check_choice, check_int
from workbench.bench.trainer_variants import bench_model, bench_setup, hand_written_loader, train_and_validate
from workbench.data import Splits
from workbench.tables import text_table
from workbench.train import TrainConfig, Trainer

PEERS = {"Lightning": "lightning", "Fabric": "lightning", "Accelerate": "accelerate"}  # name → module


@dataclass(frozen=True)
class PeerBenchmark:
    """Seconds of every run of each variant (in order; the variants alternated) and the peers skipped."""

    seconds: dict[str, tuple[float, ...]]
    skipped: dict[str, str]
    steps: int

    def ratios(self, variant: str) -> list[float]:
        """`variant`'s time / the hand-written loop's, per repeat."""
        return [v / h for v, h in zip(self.seconds[variant], self.seconds["hand-written"], strict=True)]

    def ratio(self, variant: str) -> float:
        return statistics.median(self.ratios(variant))

    def table(self) -> str:
        rows = []
        for variant, runs in self.seconds.items():
            ratios = self.ratios(variant)
            target = ""
            if variant == "workbench Trainer":
                peers = [name for name in self.seconds if name in PEERS]
                target = "≤ 1.00" + (f" and ≤ {', '.join(peers)}" if peers else "")
            rows.append(
                [
                    variant,
                    f"{statistics.median(runs):.3f} s",
                    f"{statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f})",
                    target,
                ]
            )
        for name, why in self.skipped.items():
            rows.append([name, "skipped", why, ""])
        header = ["loop", "median", "/ hand-written (range over repeats)", "target"]
        return text_table(header, rows)


def benchmark_peers(
    *, repeats: int = 5, epochs: int = 3, n_samples: int = 4096, device: str = "cpu"
) -> PeerBenchmark:
    """Time every installed variant (see the module docstring)."""
    check_int("repeats", repeats, minimum=1)
    check_int("epochs", epochs, minimum=1)
    check_choice("device", device, ("cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a CUDA GPU, and torch sees none here; use device='cpu'")
    splits, config = bench_setup(epochs, n_samples)
    config = dataclasses.replace(config, device=device)
    data = Splits(
        TensorDataset(splits.train.features, splits.train.targets),
        val=TensorDataset(splits.val.features, splits.val.targets),
    )
    variants: dict[str, Callable[[], None]] = {
        "hand-written": lambda: _hand_written(data, config),
        "workbench Trainer": lambda: Trainer(bench_model(), functional.cross_entropy, data, config).fit(),
    }
    skipped: dict[str, str] = {}
    loops = {"Lightning": _lightning, "Fabric": _fabric, "Accelerate": _accelerate}
    for name, module in PEERS.items():
        if importlib.util.find_spec(module) is None:
            skipped[name] = f"not installed (pip install {module}, or the `peers` extra)"
        else:
            variants[name] = lambda loop=loops[name]: loop(data, config)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    with _quiet_peers():
        for run in variants.values():  # warm-up: imports, thread pools, first-call costs
            run()
        for _ in range(repeats):
            for name, run in variants.items():
                started = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - started)
    steps = -(-len(data.train) // config.batch_size) * epochs
    return PeerBenchmark({name: tuple(runs) for name, runs in seconds.items()}, skipped, steps)


@contextlib.contextmanager
def _quiet_peers() -> Iterator[None]:
    """The peers' info logs and warnings (few DataLoader workers, GPU available...) off while timing."""
    if importlib.util.find_spec("lightning") is not None:
        import lightning  # noqa: F401  (its import sets its loggers' levels: before ours)
    loggers = [logging.getLogger(name) for name in ("lightning", "lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _loaders(data: Splits, config: TrainConfig) -> tuple[DataLoader, DataLoader]:
    torch.manual_seed(config.seed)
    train = DataLoader(data.train, batch_size=config.batch_size, shuffle=True)
    return train, DataLoader(data.val, batch_size=config.batch_size)


def _adam(parameters: Iterable[torch.nn.Parameter], config: TrainConfig) -> torch.optim.Adam:
    """The loops' Adam: torch's fused one on CUDA (the Trainer's choice there), its default on CPU."""
    return torch.optim.Adam(parameters, lr=config.optimizer.lr, fused=config.device == "cuda" or None)


def _hand_written(data: Splits, config: TrainConfig) -> None:
    """`hand_written_loader`'s loop, on `config.device` (each batch copied there) with `_adam`."""
    if config.device == "cpu":
        return hand_written_loader(bench_model(), data, config)
    device = torch.device(config.device)
    model = bench_model().to(device)
    optimizer = _adam(model.parameters(), config)
    train_and_validate(model, optimizer, *_loaders(data, config), config.epochs, device=device)
    return None


def _lightning(data: Splits, config: TrainConfig) -> None:
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = bench_model()

        def training_step(self, batch, index):
            x, y = batch
            return functional.cross_entropy(self.model(x), y)

        def validation_step(self, batch, index):
            x, y = batch
            return functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return _adam(self.parameters(), config)

    module = Module()
    trainer = lightning.Trainer(
        max_epochs=config.epochs,
        accelerator="gpu" if config.device == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, *_loaders(data, config))


def _fabric(data: Splits, config: TrainConfig) -> None:
    import lightning

    fabric = lightning.Fabric(accelerator=config.device, devices=1)
    model = bench_model()
    model, optimizer = fabric.setup(model, _adam(model.parameters(), config))
    train, val = fabric.setup_dataloaders(*_loaders(data, config))
    train_and_validate(model, optimizer, train, val, config.epochs, backward=fabric.backward)


def _accelerate(data: Splits, config: TrainConfig) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=config.device == "cpu")
    model = bench_model()
    optimizer = _adam(model.parameters(), config)
    model, optimizer, train, val = accelerator.prepare(model, optimizer, *_loaders(data, config))
    train_and_validate(model, optimizer, train, val, config.epochs, backward=accelerator.backward)
