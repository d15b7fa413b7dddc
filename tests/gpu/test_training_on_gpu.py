"""The Trainer on CUDA as a user runs it: fp32, bf16 and fp16 with loss scaling against the CPU run, the
device-resident dataset, pinned prefetch on a side stream, torch.compile, `launch` of 2 ranks on one GPU,
NVML telemetry."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from workbench.data import Splits, device_feed, load_dataset, split_dataset
from workbench.monitor.readers import NvmlReader
from workbench.parallel import launch
from workbench.train import OptimizerConfig, TrainConfig, Trainer


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def _fit(splits, device: str, precision: str = "fp32", **changes):
    config = TrainConfig(
        epochs=4, batch_size=64, optimizer=OptimizerConfig("adam", lr=3e-3), precision=precision,
        device=device, seed=0, **changes,
    )  # fmt: skip
    trainer = Trainer(_mlp(), functional.cross_entropy, splits, config)
    return trainer, trainer.fit()


@pytest.fixture(scope="module")
def cpu_run(digits):
    return _fit(digits, "cpu")[1]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_trainer_on_cuda_matches_the_cpu_run(digits, cpu_run, precision):
    trainer, result = _fit(digits, "cuda", precision)
    assert trainer.strategy.device.type == "cuda"
    assert (trainer.scaler is not None) == (precision == "fp16")
    cpu_loss, gpu_loss = cpu_run.metrics["val"]["loss"], result.metrics["val"]["loss"]
    tolerance = 0.02 if precision == "fp32" else 0.1  # autocast rounds the matmuls to 8 or 11 bits
    assert abs(gpu_loss - cpu_loss) <= tolerance * cpu_loss + 0.01, (precision, gpu_loss, cpu_loss)
    assert result.metrics["test"]["accuracy"] > 0.9


def test_an_in_memory_dataset_moves_to_the_gpu_once(digits):
    trainer, _ = _fit(digits, "cuda")
    assert trainer._loaders["train"].dataset.features.device.type == "cuda"


def test_a_users_dataloader_is_prefetched_from_pinned_memory_on_a_side_stream(digits, monkeypatch):
    sides, on_gpu = [], []
    real_send = device_feed._send

    def send(batch, device, side):
        moved = real_send(batch, device, side)
        sides.append(side.cuda_stream)
        on_gpu.append(all(t.device.type == "cuda" for t in moved[0]))
        return moved

    monkeypatch.setattr(device_feed, "_send", send)
    train = digits.train
    loader = DataLoader(TensorDataset(train.features, train.targets), batch_size=64, shuffle=True)
    _, result = _fit(Splits(loader, val=digits.val, test=digits.test), "cuda")
    assert sides and torch.cuda.default_stream().cuda_stream not in sides  # copies on a side stream
    assert on_gpu and all(on_gpu)
    assert result.metrics["test"]["accuracy"] > 0.9


def test_torch_compile_trains_on_cuda(digits):
    trainer, result = _fit(digits, "cuda", compile="default")
    assert trainer.compile_report, "no compile report"
    assert result.metrics["test"]["accuracy"] > 0.9


def _rank_device(strategy):
    return {"rank": strategy.rank, "device": str(strategy.device), "backend": strategy.backend}


def test_two_ranks_on_one_gpu_run_on_gloo_or_are_refused_with_the_fix():
    if torch.cuda.device_count() != 1:
        pytest.skip("checks the one-GPU case")
    with pytest.raises(ValueError, match=r"nccl needs one per process; use nprocs ≤ 1, or backend='gloo'"):
        launch(_rank_device, 2, backend="nccl")
    assert launch(_rank_device, 2)["backend"] == "gloo"


def test_nvml_reads_this_gpu():
    reader = NvmlReader()
    try:
        readings = reader.read()
    finally:
        reader.close()
    assert readings, reader.unavailable_reason
    first = readings[0]
    name = torch.cuda.get_device_name(0)
    assert first["name"] == name
    assert 0 < first["memory_used"] <= first["memory_total"]


def test_the_memory_estimate_of_a_cuda_step_holds_within_its_band():
    """Made with the model on the GPU, as a user there makes it, the estimate holds within its stated band
    (its check's real steps see what cuDNN and cuBLAS allocate); the same estimate made on the CPU is printed
    beside it (it cannot see those workspaces: on an H100, -63% for the GRU, -20% for small_cnn)."""
    from tests.estimate.test_peak_matrix import CASES
    from tests.gpu.helpers import cuda_estimates, cuda_peak

    misses = []
    for name, case in CASES.items():
        on_gpu, on_cpu = cuda_estimates(case)
        torch.cuda.empty_cache()
        real = cuda_peak(case)
        error = on_gpu.total / real.peak - 1
        mib = f"estimate {on_gpu.total / 2**20:.2f} MiB, CUDA peak {real.peak / 2**20:.2f} MiB"
        cpu_error = on_cpu.total / real.peak - 1
        print(f"{name}: {mib}, {error:+.1%} ({on_gpu.basis}); made on the CPU: {cpu_error:+.1%}")
        if abs(error) > on_gpu.uncertainty:
            misses.append(f"{name.split(',')[0]}: {mib} ({error:+.0%}, band ±{on_gpu.uncertainty:.0%})")
        torch.cuda.empty_cache()
    assert not misses, "; ".join(misses)


def test_a_resident_dataset_serves_batches_without_waiting_for_the_gpu(cuda):
    """The epoch's order goes to the GPU once, page-locked: no batch waits for queued work (a CPU index
    copied from pageable memory at every batch did, and the Trainer ran 1.14× a hand loop)."""
    import dataclasses

    from workbench.data import ShardedLoader, load_dataset

    digits = load_dataset("digits")
    resident = dataclasses.replace(digits, features=digits.features.to(cuda), targets=digits.targets.to(cuda))
    torch.cuda.set_sync_debug_mode("error")
    try:
        batches = list(ShardedLoader(resident, batch_size=256))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(batches) == 8 and batches[0][0].device == cuda


def test_a_class_weighted_loss_module_trains_on_cuda_and_a_mask_left_on_the_cpu_is_named(digits):
    """The CPU habits that fail on a GPU: `nn.CrossEntropyLoss(weight=w)` with w on the CPU (moved now, as
    the model is), and a mask kept as a plain attribute (named, with register_buffer)."""
    config = TrainConfig(epochs=1, batch_size=64, device="cuda")
    weighted = nn.CrossEntropyLoss(weight=torch.linspace(1.0, 2.0, 10))
    assert Trainer(_mlp(), weighted, digits, config).fit().status == "finished"
    assert weighted.weight.device.type == "cuda"

    class WithMask(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()
            self.mask = torch.ones(10)

        def forward(self, x):
            return self.net(x) * self.mask

    with pytest.raises(ValueError, match=r"mask \(\(10,\) on cpu\) is a plain tensor attribute"):
        Trainer(WithMask(), functional.cross_entropy, digits, config).fit()


def test_a_one_cycle_scheduler_under_fp16_loss_scaling_steps_silently_and_as_many_times_as_the_fit(digits):
    """fp16's GradScaler skips the first steps, whose scaled gradients overflow; torch then warns that the
    scheduler stepped before the optimizer. The Trainer steps it on every step, as its own schedules count."""
    from torch.optim.lr_scheduler import OneCycleLR

    from workbench.train import LrScheduler

    one_cycle = LrScheduler(lambda optimizer, plan: OneCycleLR(optimizer, plan.lr, plan.steps), "step")
    config = TrainConfig(epochs=2, batch_size=64, precision="fp16", device="cuda")
    trainer = Trainer(_mlp(), functional.cross_entropy, digits, config, scheduler=one_cycle)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainer.fit()
    assert [str(w.message) for w in caught if "lr_scheduler" in str(w.message)] == []
    assert result.status == "finished" and trainer.scheduler.last_epoch == trainer.total_steps


def test_recomputed_blocks_lower_the_cuda_peak_under_bf16_and_train_alike():
    """``activation_checkpointing="blocks"`` on a GPU: the probed step's CUDA peak falls (4 blocks at batch
    64 × 128 tokens), the val loss stays within what bf16's kernels vary by."""
    from workbench import models
    from workbench.train import Callback

    class Peak(Callback):
        def on_step(self, event):
            if "memory" in event:
                self.cuda_peak = event["memory"]["cuda_peak"]

    text = load_dataset("text", n_samples=1024, context=128)
    splits = split_dataset(text, (0.8, 0.1, 0.1), seed=0)
    peaks, losses = {}, {}
    for which in (None, "blocks"):
        torch.manual_seed(0)
        model = models.transformer_lm(text.num_classes, 128, d_model=128, n_heads=4, n_layers=4)
        adamw = OptimizerConfig("adamw", lr=3e-3)
        config = TrainConfig(epochs=1, batch_size=64, precision="bf16", device="cuda", log_every=1,
                             optimizer=adamw, activation_checkpointing=which)  # fmt: skip
        peak = Peak()
        trainer = Trainer(model, models.next_token_loss, splits, config, callbacks=[peak], progress=False)
        result = trainer.fit()
        peaks[which], losses[which] = peak.cuda_peak, result.metrics["val"]["loss"]
        torch.cuda.empty_cache()
    print(f"CUDA peak: {peaks[None] / 2**20:.1f} MiB kept, {peaks['blocks'] / 2**20:.1f} MiB recomputed")
    assert peaks["blocks"] < 0.7 * peaks[None], peaks
    assert losses["blocks"] == pytest.approx(losses[None], rel=0.02), losses
