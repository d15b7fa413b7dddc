"""Analytic memory estimates against the components they count (the measured proxy), on one device and on
2 DDP gloo ranks; the rules; bad input. (Estimates against the real allocator peak: test_peak_matrix.py.)"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from tests.gloo_ranks import run_on_gloo_ranks
from workbench import models
from workbench.estimate import (
    BucketLog,
    Cluster,
    ModelProfile,
    counting_allreduce_hook,
    estimate_memory,
    measure_training_step,
    optimizer_state_tensors,
    profile_model,
)
from workbench.estimate.step_time import forward_flops
from workbench.tables import text_table

TOLERANCE = 0.10
# name -> (model factory, input shape of one batch, target factory, loss)
CASES = {
    "mlp": (
        lambda: models.mlp(64, 10, hidden=(128, 128)),
        (64, 1, 8, 8),
        "classes",
        functional.cross_entropy,
    ),
    "small_cnn": (lambda: models.small_cnn(3, 10), (32, 3, 32, 32), "classes", functional.cross_entropy),
    "linear": (lambda: models.linear(10), (64, 10), "values", functional.mse_loss),
}
OPTIMIZERS = {"sgd": 0.9, "adam": 0.0}  # name -> momentum


def _batch(case: str) -> tuple[torch.Tensor, torch.Tensor]:
    _, shape, target, _ = CASES[case]
    inputs = torch.randn(*shape)
    if target == "classes":
        return inputs, torch.randint(0, 10, (shape[0],))
    return inputs, torch.randn(shape[0], 1)


def _optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=OPTIMIZERS["sgd"])
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def _estimate_and_measure(case: str, optimizer: str, precision: str, **ddp: object):
    torch.manual_seed(0)
    build, _, _, loss = CASES[case]
    model = build()
    inputs, targets = _batch(case)
    estimate = estimate_memory(
        model,
        sample=inputs[:1],
        batch_size=inputs.shape[0],
        precision=precision,
        optimizer=optimizer,
        momentum=OPTIMIZERS[optimizer],
        method="analytic",  # the rules, against the components they count (the peak: test_peak_matrix.py)
        **ddp,
    )
    return estimate, model, inputs, targets, loss


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_single_device_estimate_is_within_10_percent_of_measured(case, optimizer, precision):
    estimate, model, inputs, targets, loss = _estimate_and_measure(case, optimizer, precision)
    measured = measure_training_step(
        model,
        _optimizer(optimizer, model),
        loss,
        inputs,
        targets,
        autocast_dtype=torch.bfloat16 if precision == "bf16" else None,
    )
    assert estimate.grads == measured.grads
    assert abs(estimate.total / measured.total - 1) < TOLERANCE, (estimate, measured)
    if precision == "fp32":  # mixed precision moves the 16-bit weight copies between params and activations
        assert estimate.params == measured.params
        assert abs(estimate.activations / measured.activations - 1) < TOLERANCE


DDP_CASES = [
    ("mlp", "sgd", False),
    ("mlp", "adam", False),
    ("small_cnn", "adam", False),
    ("mlp", "adam", True),
]


def _ddp_cases(rank: int, world_size: int) -> list[tuple]:
    """Every DDP case on this rank: (case, optimizer, bucket view, estimate, measured)."""
    from torch.nn.parallel import DistributedDataParallel

    rows = []
    for case, optimizer, bucket_view in DDP_CASES:
        estimate, model, inputs, targets, loss = _estimate_and_measure(
            case,
            optimizer,
            "fp32",
            strategy="ddp",
            devices=world_size,
            gradient_as_bucket_view=bucket_view,
        )
        ddp_model = DistributedDataParallel(model, gradient_as_bucket_view=bucket_view)
        log = BucketLog()
        ddp_model.register_comm_hook(log, counting_allreduce_hook)
        measured = measure_training_step(
            ddp_model, _optimizer(optimizer, ddp_model), loss, inputs, targets, buckets=log
        )
        rows.append((case, optimizer, bucket_view, estimate, measured))
    return rows


def test_ddp_estimate_per_rank_is_within_10_percent_of_measured(free_port):
    per_rank = run_on_gloo_ranks(_ddp_cases, 2, free_port())
    assert [len(rows) for rows in per_rank] == [len(DDP_CASES)] * 2
    for rows in per_rank:
        for _case, _optimizer, bucket_view, estimate, measured in rows:
            assert measured.buckets == (0 if bucket_view else measured.grads)  # DDP keeps G bytes of buckets
            assert estimate.comm_buffers == measured.buckets
            assert abs(estimate.total / measured.total - 1) < TOLERANCE, (estimate, measured)


def test_profile_counts_what_autograd_keeps():
    profile = profile_model(models.small_cnn(3, 10), torch.zeros(2, 3, 32, 32))
    # input 3·32·32, ReLU outputs 16·32·32 and 32·16·16, pooled 16·16·16, flattened 32
    assert profile.activation_elements == 3 * 1024 + 16 * 1024 + 16 * 256 + 32 * 256 + 32
    assert profile.activation_fixed_bytes == 8 * (16 * 256 + 32 * 64)  # max-pool int64 indices
    assert profile.output_elements == 10
    assert profile.largest_layer_param_count == 32 * 16 * 9 + 32


def test_strategy_rules():
    profile = ModelProfile(
        param_count=1000, activation_fixed_bytes=100, linear_param_count=600, largest_layer_param_count=200
    )
    kwargs = {"batch_size": 8, "optimizer": "adam", "devices": 4}
    ddp = estimate_memory(profile, strategy="ddp", **kwargs)
    assert (ddp.params, ddp.grads, ddp.optimizer_state, ddp.activations, ddp.comm_buffers) == (
        4000,
        4000,
        8000,
        800,
        4000,
    )
    fsdp = estimate_memory(profile, strategy="fsdp", **kwargs)
    assert (fsdp.params, fsdp.optimizer_state, fsdp.activations, fsdp.comm_buffers) == (1000, 2000, 800, 1600)
    pipeline = estimate_memory(profile, strategy="pipeline", micro_batches=8, **kwargs)
    assert (pipeline.params, pipeline.activations) == (1000, 800 / 4 * 4 / 8)
    tensor = estimate_memory(profile, strategy="tensor", **kwargs)
    assert tensor.params == (400 + 600 / 4) * 4
    mixed = estimate_memory(profile, precision="bf16", **{**kwargs, "devices": 1})
    assert (mixed.params, mixed.grads) == (6000, 4000)
    assert estimate_memory(1000, activation_bytes_per_sample=100, batch_size=8).activations == 800
    assert optimizer_state_tensors("sgd") == 0


def test_fits_and_rows():
    estimate = estimate_memory(1000, activation_bytes_per_sample=0, batch_size=1, optimizer="sgd")
    assert estimate.fits(8000) and not estimate.fits(7999)
    assert estimate.rows()[-1][:2] == ("total", 8000)
    assert "optimizer_state" in text_table(["component", "bytes", "MiB"], estimate.rows())


@pytest.mark.parametrize("method", ["analytic", "traced"])
def test_ema_decay_counts_the_averaged_weights_the_trainer_keeps(method):
    from workbench.train.strategy import SingleDevice
    from workbench.train.weight_average import WeightAverage

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2))
    kwargs = {"sample": torch.randn(2, 8), "batch_size": 4, "method": method}
    plain, averaged = (estimate_memory(model, **kwargs, ema_decay=d) for d in (None, 0.999))
    average = WeightAverage(0.999, model, SingleDevice("cpu"))
    average.start(None)  # what a fit with ema_decay=0.999 allocates: parameters and BatchNorm's statistics
    kept = sum(t.numel() * t.element_size() for t in average._average)
    assert plain.weight_average == 0
    assert averaged.weight_average == kept == (8 * 16 + 16 + 2 * 16 + 16 * 2 + 2 + 2 * 16) * 4
    assert averaged.total - plain.total == kept
    assert [row[0] for row in averaged.rows()][-2:] == ["weight_average", "total"]
    assert "weight_average" not in [row[0] for row in plain.rows()]


def test_activation_checkpointing_is_traced_with_the_blocks_recomputed_and_matches_the_real_peak():
    """4 transformer blocks at batch 32: the traced estimate with the blocks recomputed lands on the
    allocator's peak of the same step (torch.profiler on CPU), well under the estimate that keeps them all."""
    from workbench.estimate.measure import measure_peak
    from workbench.train import OptimizerConfig
    from workbench.train.activation_checkpointing import ActivationCheckpointing
    from workbench.train.optim import build_optimizer

    torch.manual_seed(0)
    model = models.transformer_lm(65, 64, d_model=64, n_heads=4, n_layers=4)
    sample = target = torch.zeros(1, 64, dtype=torch.long)
    kwargs = {"sample": sample, "target": target, "loss_fn": models.next_token_loss, "optimizer": "adamw"}
    kept, recomputed = (
        estimate_memory(model, batch_size=32, activation_checkpointing=which, **kwargs)
        for which in (None, "blocks")
    )
    x, y = torch.randint(0, 65, (32, 64)), torch.randint(0, 65, (32, 64))
    with ActivationCheckpointing(model, "blocks").applied(model):
        optimizer = build_optimizer(model.parameters(), OptimizerConfig("adamw"))
        real = measure_peak(model, optimizer, models.next_token_loss, x, y).peak
    assert recomputed.total == pytest.approx(real, rel=recomputed.uncertainty), (recomputed.total, real)
    assert recomputed.total < 0.6 * kept.total and recomputed.basis.startswith("traced")
    with pytest.raises(ValueError, match=r"activation_checkpointing='blocks' is estimated by tracing a step"):
        estimate_memory(model, batch_size=32, activation_checkpointing="blocks", method="analytic", **kwargs)


def test_ema_decay_rule_shards_the_parameters_with_the_strategy():
    profile = ModelProfile(param_count=1000, activation_fixed_bytes=0, linear_param_count=600)
    kwargs = {"batch_size": 1, "devices": 4, "ema_decay": 0.9}
    assert estimate_memory(profile, strategy="ddp", **kwargs).weight_average == 4000
    assert estimate_memory(profile, strategy="fsdp", **kwargs).weight_average == 1000
    assert estimate_memory(profile, strategy="tensor", **kwargs).weight_average == (400 + 600 / 4) * 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 0}, "batch_size must be an integer ≥ 1"),
        ({"batch_size": -4}, "batch_size must be an integer ≥ 1"),
        ({"precision": "fp8"}, "precision='fp8' is not supported; allowed values: 'fp32', 'bf16', 'fp16'"),
        ({"optimizer": "lion"}, "optimizer='lion' is not supported; allowed values: 'sgd', 'adam', 'adamw'"),
        ({"strategy": "zero"}, "strategy='zero' is not supported; allowed values: 'single', 'ddp', 'fsdp'"),
        ({"momentum": -0.5}, "momentum must be a number ≥ 0"),
        ({"strategy": "ddp", "devices": 0}, "devices must be an integer ≥ 1"),
        (
            {"strategy": "ddp", "devices": 9, "cluster": Cluster(8)},
            "devices=9 exceeds the cluster's 8 devices",
        ),
        ({"devices": 2}, "devices=2 with strategy='single'"),
        ({"strategy": "pipeline", "devices": 2, "micro_batches": 0}, "micro_batches must be an integer ≥ 1"),
        ({"model": 0}, "model (parameter count) must be an integer ≥ 1"),
        ({"activation_bytes_per_sample": None}, "activation_bytes_per_sample is required"),
        ({"activation_bytes_per_sample": -1}, "activation_bytes_per_sample must be a number ≥ 0"),
        ({"model": models.linear(3)}, "sample is required"),
        ({"ema_decay": 1.0}, "ema_decay must be a finite number > 0 and < 1, got 1.0"),
        (
            {"model": models.linear(3), "sample": torch.zeros(0, 3)},
            "sample batch size must be an integer ≥ 1",
        ),
    ],
)
def test_bad_input_names_the_field(changes, message):
    kwargs = {"model": 1000, "activation_bytes_per_sample": 10, "batch_size": 4, **changes}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        estimate_memory(kwargs.pop("model"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"devices": 0}, "cluster.devices must be"),
        ({"devices": 1, "memory_bytes": 0}, "cluster.memory_bytes"),
    ],
)
def test_bad_cluster(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Cluster(**kwargs)


def test_a_model_on_another_device_than_its_sample_is_profiled_there():
    """A trained model sits on the GPU while a sample from the dataset is on the CPU (notebook 06 on an H200,
    2026-11-27, stopped inside torch: 'mat1 is on cpu, different from other tensors on cuda:0'). Here the
    model is on the meta device, which fails the same way for a CPU input."""

    class MetaOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 2, device="meta")

        def forward(self, x):
            assert x.device.type == "meta", f"the sample reached the model on {x.device}"
            return self.layer(x)

    model = MetaOnly()
    estimate = estimate_memory(
        model, sample=torch.zeros(1, 3), batch_size=8, optimizer="adam", method="analytic"
    )
    assert estimate.total > 0
    assert forward_flops(model, torch.zeros(4, 3)) == 2 * 3 * 2 * 4


def test_every_precision_and_optimizer_the_trainer_takes_has_an_estimate():
    """The estimator keeps its own lists (what it has a model for); a choice added to the Trainer fails here
    until the memory, communication and hardware models know it."""
    from workbench.estimate import comm, hardware, memory
    from workbench.train import choices

    assert memory.OPTIMIZERS == choices.OPTIMIZERS
    assert memory.PRECISIONS == comm.PRECISIONS == hardware.PRECISIONS == choices.PRECISIONS
