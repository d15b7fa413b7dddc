"""Training on a CUDA GPU, measured for `workbench gpu-check`: the Trainer against a hand-written loop (and
with a live Dashboard), bf16 autocast against fp32, torch.compile against eager, on a character GPT at GPU
size; and the input paths: a device-resident dataset against pageable copies, a DataLoader's data wait.

The model: `models.transformer_lm` with d_model 768, 12 heads, 6 blocks, context 256 (43M parameters) on the
"text" dataset, batch 128, fused AdamW, data resident on the GPU: ~8 TFLOP a step, so that the GPU, not
Python, sets the step time (at d_model 512 and batch 32, the first size, an H100 ran 0.9 TFLOP steps in
13–19 ms: launch- and host-bound, ~55 TFLOP/s, where the Trainer's host work and bf16's gain are what
the CPU allows). Variants alternate within each repeat; each number is the median seconds per optimizer
step over the repeats, with the range of the ratios.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from workbench import models
from workbench.bench.gpu_report import Check, at_least, at_most, reported
from workbench.data import Splits, load_dataset
from workbench.devices.microbench import float32_matmul_precision
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.events import Callback, Event

CONTEXT, D_MODEL, HEAD_WIDTH, BLOCKS, BATCH = 256, 768, 64, 6, 128
REPEATS = 5


def _setup(samples: int, device: str, width: int) -> tuple[Splits, torch.nn.Module, TrainConfig]:
    data = load_dataset("text", n_samples=samples, context=CONTEXT)
    torch.manual_seed(0)
    model = models.transformer_lm(data.num_classes, CONTEXT, d_model=width,
                                  n_heads=max(1, width // HEAD_WIDTH), n_layers=BLOCKS)  # fmt: skip
    config = TrainConfig(
        epochs=1, batch_size=BATCH, optimizer=OptimizerConfig("adamw", lr=3e-4), device=device, seed=0,
    )  # fmt: skip
    return Splits(data), model, config


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed_fit(fit: Callable[[], int]) -> tuple[int, float]:
    """`fit`'s steps and its wall seconds, the device's queued work finished before and after."""
    _synchronize()
    started = time.perf_counter()
    steps = fit()
    _synchronize()
    return steps, time.perf_counter() - started


def _per_step(fit: Callable[[], int]) -> float:
    steps, seconds = _timed_fit(fit)
    return seconds / steps


def _trainer_fit(trainer: Trainer) -> Callable[[], int]:
    return lambda: trainer.fit().step


def _alternate(variants: dict[str, Callable[[], int]]) -> dict[str, list[float]]:
    """Seconds per step of each variant's fits (`_alternate_fits`)."""
    steps, seconds = _alternate_fits(variants)
    return {name: [s / steps[name] for s in runs] for name, runs in seconds.items()}


def _ratio(seconds: dict[str, list[float]], slow: str, fast: str) -> tuple[float, str]:
    """median(slow) / median(fast), and the range of the repeat-by-repeat ratios with both medians."""
    ratios = [s / f for s, f in zip(seconds[slow], seconds[fast], strict=True)]
    median_slow, median_fast = statistics.median(seconds[slow]), statistics.median(seconds[fast])
    milliseconds = f"{1e3 * median_slow:.2f} vs {1e3 * median_fast:.2f} ms/step"
    detail = f"{milliseconds}, ratios {min(ratios):.2f}–{max(ratios):.2f}"
    return median_slow / median_fast, detail


def _hand_loop(
    model: torch.nn.Module, splits: Splits, config: TrainConfig, dtype: torch.dtype
) -> Callable[[], int]:
    """The loop a careful user writes: data on the GPU, a shuffled index per epoch, autocast, fused AdamW,
    the loss summed on the device (read once at the end)."""
    device = torch.device(config.device)
    model = model.to(device)
    features, targets = splits.train.features.to(device), splits.train.targets.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optimizer.lr, fused=True)

    def fit() -> int:
        order = torch.randperm(len(features), device=device)
        total = torch.zeros((), device=device)
        steps = 0
        for start in range(0, len(order), config.batch_size):
            index = order[start : start + config.batch_size]
            with torch.autocast(device.type, dtype=dtype):
                loss = models.next_token_loss(model(features[index]), targets[index])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            total += loss.detach()
            steps += 1
        total.item()
        return steps

    return fit


def trainer_against_hand_loop(samples: int = 2048, device: str = "cuda", width: int = D_MODEL) -> list[Check]:
    """The Trainer (bf16, fused AdamW) against `_hand_loop` with the same, and the step-time breakdown."""
    splits, model, config = _setup(samples, device, width)
    config = config.replace(precision="bf16")
    trainer = Trainer(copy.deepcopy(model), models.next_token_loss, splits, config)
    untimed = Trainer(
        copy.deepcopy(model), models.next_token_loss, splits, config.replace(time_breakdown=False)
    )
    hand = _hand_loop(copy.deepcopy(model), splits, config, torch.bfloat16)
    seconds = _alternate({"trainer": _trainer_fit(trainer), "untimed": _trainer_fit(untimed), "hand": hand})
    ratio, detail = _ratio(seconds, "trainer", "hand")
    breakdown, breakdown_detail = _ratio(seconds, "trainer", "untimed")
    size = f"GPT d{width} L{BLOCKS} T{CONTEXT} b{BATCH} bf16"
    return [
        at_most(f"Trainer step, {size}", ratio, "× hand loop", "hand loop, same AdamW, bf16", 1.02, detail),
        at_most(f"step-time breakdown on, {size}", breakdown, "× off", "Trainer, time_breakdown=False", 1.03,
                breakdown_detail),
    ]  # fmt: skip


def precision_and_compile(samples: int = 2048, device: str = "cuda", width: int = D_MODEL) -> list[Check]:
    """fp32 (TF32 off) against bf16 autocast, and torch.compile (default mode) against eager (Trainer)."""
    splits, model, config = _setup(samples, device, width)
    checks: list[Check] = []
    with float32_matmul_precision("highest"):
        fp32 = Trainer(copy.deepcopy(model), models.next_token_loss, splits, config.replace(precision="fp32"))
        bf16 = Trainer(copy.deepcopy(model), models.next_token_loss, splits, config.replace(precision="bf16"))
        seconds = _alternate({"fp32": _trainer_fit(fp32), "bf16": _trainer_fit(bf16)})
    speedup, detail = _ratio(seconds, "fp32", "bf16")
    size = f"GPT d{width} L{BLOCKS} T{CONTEXT} b{BATCH}"
    checks.append(at_least(f"bf16 autocast, {size}", speedup, "× fp32", "fp32, TF32 off", 2.0, detail))
    compiled_config = config.replace(precision="bf16", compile="default")
    compiled = Trainer(copy.deepcopy(model), models.next_token_loss, splits, compiled_config)
    started = time.perf_counter()
    compiled.fit()  # compiles
    first_fit = time.perf_counter() - started
    report = compiled.compile_report or {}
    seconds = _alternate({"eager": _trainer_fit(bf16), "compiled": _trainer_fit(compiled)})
    speedup, detail = _ratio(seconds, "eager", "compiled")
    checks.append(at_least(f"torch.compile, {size} bf16", speedup, "× eager", "eager, bf16", 1.3, detail))
    counts = f"{report.get('compiles')} compiles, {report.get('graph_breaks')} graph breaks"
    detail = f"first fit {first_fit:.1f} s; {counts}"
    checks.append(reported("torch.compile: compiling", float(report.get("seconds", 0.0)), "s", "", detail))
    return checks


def dashboard_overhead(
    samples: int = 2048, device: str = "cuda", width: int = D_MODEL, precision: str = "bf16"
) -> list[Check]:
    """The Trainer with a live `Dashboard` attached (`Dashboard.fit`) against the Trainer alone, apart per
    step and once per fit: each fits `samples` and 4 × `samples` (alternating), so the time per extra step
    gives the per-step ratio (the ≤ 1.02 target) and what is left the cost of each fit's end, where the
    Dashboard draws every plot's final state (the first H100 run timed 16-step fits whole: 1.13×)."""
    from workbench.widgets.dashboard import Dashboard

    lengths = {"short": samples, "long": 4 * samples}
    dashboards, variants = [], {}
    for length, count in lengths.items():
        splits, model, config = _setup(count, device, width)
        config = config.replace(precision=precision)
        alone = Trainer(copy.deepcopy(model), models.next_token_loss, splits, config)
        dashboard = Dashboard(Trainer(copy.deepcopy(model), models.next_token_loss, splits, config))
        dashboards.append(dashboard)
        variants[f"dashboard {length}"] = lambda d=dashboard: d.fit().step
        variants[f"alone {length}"] = _trainer_fit(alone)
    try:
        steps, seconds = _alternate_fits(variants)
    finally:
        for dashboard in dashboards:
            dashboard.close()
    short, long = steps["alone short"], steps["alone long"]
    per_step = {  # seconds per step beyond the short fit's, each repeat
        name: [
            (b - a) / (long - short)
            for a, b in zip(seconds[f"{name} short"], seconds[f"{name} long"], strict=True)
        ]
        for name in ("dashboard", "alone")
    }
    ratio, detail = _ratio(per_step, "dashboard", "alone")
    extra_per_step = [d - a for d, a in zip(per_step["dashboard"], per_step["alone"], strict=True)]
    fit_end = [
        d - a - short * extra
        for d, a, extra in zip(
            seconds["dashboard short"], seconds["alone short"], extra_per_step, strict=True
        )
    ]
    size = f"GPT d{width} L{BLOCKS} T{CONTEXT} b{BATCH} {precision}"
    fits = f"fits of {short} and {long} steps"
    low, high = 1e3 * min(fit_end), 1e3 * max(fit_end)
    return [
        at_most(f"Trainer + Dashboard per step, {size}", ratio, "× Trainer", "Trainer alone", 1.02,
                f"{detail}; {fits}"),
        reported(f"Dashboard once per fit, {size}", 1e3 * statistics.median(fit_end), "ms",
                 detail=f"drawing the plots' final state, range {low:.0f}–{high:.0f} ms; {fits}"),
    ]  # fmt: skip


def _alternate_fits(variants: dict[str, Callable[[], int]]) -> tuple[dict[str, int], dict[str, list[float]]]:
    """Steps of each variant's fit and the wall seconds of its fits, the variants alternating (a warm-up of
    each first, which counts the steps: allocator, cuBLAS handles, compilation)."""
    steps = {name: fit() for name, fit in variants.items()}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(REPEATS):
        for name, fit in variants.items():
            steps[name], elapsed = _timed_fit(fit)
            seconds[name].append(elapsed)
    return steps, seconds


class _DataWait(Callback):
    """Each logged step's time and the share of it spent waiting for the loader (the ``step_time`` event)."""

    def __init__(self) -> None:
        self.shares: list[float] = []
        self.step_ms: list[float] = []

    def on_step(self, metrics: Event) -> None:
        phases = metrics.get("step_time")
        if phases and phases.get("total"):
            self.shares.append(phases["data"] / phases["total"])
            self.step_ms.append(1e3 * phases["total"])


def input_paths(device: str = "cuda", epochs: int = 20, loader_workers: int | None = None) -> list[Check]:
    """Digits epochs from a device-resident dataset against per-batch copies from pageable memory (the
    same MLP steps, fused Adam), and a user's DataLoader (`loader_workers` worker processes) through the
    Trainer's pinned prefetch: the share of a logged step spent waiting for data, beside what the loader
    alone takes per batch, timed after its workers started. The target is for a loader that keeps up (per
    batch no slower than a step); where it does not, the share is reported without a verdict. (On the H200
    the loader's first pass, its workers' start included, took 11.2 ms a batch: 48% of a step waited.)"""
    if loader_workers is None:  # half the cores, at most 8: the rest run the training process
        loader_workers = min(8, max(1, (os.cpu_count() or 2) // 2))
    data = load_dataset("digits")
    target = torch.device(device)
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(target)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=target.type == "cuda")
    pageable = (data.features.float(), data.targets)
    resident = tuple(t.to(target) for t in pageable)

    def epochs_from(features: torch.Tensor, targets: torch.Tensor) -> Callable[[], int]:
        def fit() -> int:
            steps = 0
            for _ in range(epochs):
                order = torch.randperm(len(features), device=features.device)
                for start in range(0, len(order), 64):
                    index = order[start : start + 64]
                    x, y = features[index].to(target), targets[index].to(target)
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    steps += 1
            return steps

        return fit

    seconds = _alternate({"pageable": epochs_from(*pageable), "resident": epochs_from(*resident)})
    speedup, detail = _ratio(seconds, "pageable", "resident")
    checks = [
        at_least("digits epoch, device-resident data", speedup, "× pageable copies", "per-batch copies from "
                 "pageable memory", 3.0, detail),
    ]  # fmt: skip
    images = load_dataset("synthetic_images", n_samples=4096, image_size=32, seed=0)
    loader = DataLoader(
        TensorDataset(images.features, images.targets), batch_size=256, shuffle=True,
        num_workers=loader_workers, persistent_workers=loader_workers > 0,
    )  # fmt: skip
    sum(1 for _ in loader)  # starts the workers (they persist), so the timed pass is the loader's pace
    started = time.perf_counter()
    batches = sum(1 for _ in loader)
    loader_ms = 1e3 * (time.perf_counter() - started) / batches
    wait = _DataWait()
    config = TrainConfig(epochs=2, batch_size=256, log_every=1, device=device, seed=0)
    torch.manual_seed(0)
    Trainer(
        models.small_cnn(3, 10), torch.nn.functional.cross_entropy, Splits(loader), config, callbacks=[wait]
    ).fit()
    share = statistics.median(wait.shares[1:] or wait.shares)  # the first step also starts the loader
    step_ms = statistics.median(wait.step_ms[1:] or wait.step_ms)
    keeps_up = loader_ms <= step_ms
    detail = (
        f"median of {len(wait.shares)} logged steps, largest {max(wait.shares):.1%}; the loader alone "
        f"{loader_ms:.2f} ms a batch ({loader_workers} workers), a step {step_ms:.2f} ms"
    )
    name = "data wait, DataLoader + pinned prefetch"
    if keeps_up:
        checks.append(at_most(name, share, "of step time", "", 0.05, detail))
    else:  # the target's condition does not hold: a number, no verdict
        checks.append(reported(name, share, "of step time", "", f"{detail}: the loader does not keep up"))
    return checks


def peers(repeats: int = REPEATS, epochs: int = 3, device: str = "cuda") -> list[Check]:
    """`workbench bench trainer --peers` on the GPU: the Trainer's median time against each installed
    peer's (Lightning, Fabric, Accelerate; the same MLP, data and fused Adam, runs alternating) and the
    hand-written loop's, the floor. A peer that is not installed is reported as such."""
    from workbench.bench.peers import PEERS, benchmark_peers

    result = benchmark_peers(repeats=repeats, epochs=epochs, device=device)
    ours = result.seconds["workbench Trainer"]
    checks = []
    for name, runs in result.seconds.items():
        if name == "workbench Trainer":
            continue
        ratios = [t / r for t, r in zip(ours, runs, strict=True)]
        ms = [1e3 * statistics.median(times) / result.steps for times in (ours, runs)]
        detail = (
            f"{ms[0]:.2f} vs {ms[1]:.2f} ms/step, ratios {min(ratios):.2f}–{max(ratios):.2f}; "
            f"MLP 3072-512-512-10, b128, {result.steps} steps"
        )
        ratio = statistics.median(ours) / statistics.median(runs)
        label = "hand-written loop" if name == "hand-written" else f"{name} loop"
        if name in PEERS:
            checks.append(at_most(f"Trainer vs {name}", ratio, f"× {name}", label, 1.0, detail))
        else:
            checks.append(reported(f"Trainer vs {label} (the floor)", ratio, "× hand loop", label, detail))
    checks += [reported(f"Trainer vs {name}", None, "", why) for name, why in result.skipped.items()]
    return checks
