"""The model-parallel strategies' checks, plans and splits, in this process (no process group needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench import models
from workbench.parallel import launch
from workbench.parallel.strategies.fsdp import FullyShardedDataParallel
from workbench.parallel.strategies.pipeline import PipelineParallel
from workbench.parallel.strategies.pipeline_split import balanced_starts
from workbench.parallel.strategies.tensor_parallel import TensorParallel, default_plan
from workbench.train import SingleDevice, TrainConfig
from workbench.train.memory import StepMemoryProbe


def transformer():
    return models.transformer_lm(37, 16, d_model=32, n_heads=4, n_layers=2)


# ---------------------------------------------------------------------- pipeline


def test_balanced_stages_split_the_transformer_between_its_blocks():
    assert PipelineParallel().stage_names(transformer(), 2) == [
        ["embed", "block0"],
        ["block1", "norm", "head"],
    ]
    assert balanced_starts([5, 5, 5, 5], 2) == [0, 2]
    assert balanced_starts([1, 100, 1], 3) == [0, 1, 2]


def test_split_points_name_where_stages_begin():
    strategy = PipelineParallel(split_points=["block1"])
    assert strategy.stage_names(transformer(), 2) == [["embed", "block0"], ["block1", "norm", "head"]]


@pytest.mark.parametrize(
    ("options", "model", "config", "match"),
    [
        ({"split_points": ["head", "block0"]}, transformer, {}, r"must name distinct layers in model order"),
        ({"split_points": ["embed"]}, transformer, {}, r"split point 'embed' is the first layer"),
        ({"split_points": []}, transformer, {}, r"make 1 stages, fewer than the 2 ranks"),
        ({}, lambda: models.linear(3), {}, r"got Linear, which has no layers to put on different ranks"),
        ({}, lambda: nn.Sequential(nn.Linear(2, 2)), {}, r"has 1 top-level layers, too few for 2 stages"),
        ({}, transformer, {"precision": "fp16"}, r"precision='fp16' is not supported with pipeline parallel"),
        ({"microbatches": 1}, transformer, {}, r"schedule='1f1b' needs at least one micro-batch per stage"),
    ],
)
def test_pipeline_refuses(options, model, config, match):
    with pytest.raises(ValueError, match=match):
        PipelineParallel(**options).validate(model(), TrainConfig(**config), world_size=2)


class _Encoder(nn.Module):
    """A model of the user's own class: children applied one after the other in forward."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_a_model_of_your_own_class_is_refused_with_the_sequential_to_give_and_that_one_pipelines():
    model = _Encoder()
    with pytest.raises(ValueError, match="got _Encoder, whose children are encoder") as refused:
        PipelineParallel().validate(model, TrainConfig(), world_size=2)
    written = str(refused.value).split("give ", 1)[1].split(" (", 1)[0]
    assert written == "nn.Sequential(*model.encoder, model.head)"
    sequential = eval(written, {"nn": nn, "model": model})  # the line the user pastes
    PipelineParallel().validate(sequential, TrainConfig(), world_size=2)
    assert PipelineParallel().stage_names(sequential, 2) == [["0", "1"], ["2", "3", "4"]]
    x = torch.randn(5, 20)
    assert torch.equal(sequential(x), model(x))  # the same layers, so the same parameters and outputs


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"split_points": "block1"}, r"split_points must be a list of layer names"),
        (
            {"schedule": "zero-bubble"},
            r"schedule='zero-bubble' is not supported; allowed values: 'gpipe', '1f1b'",
        ),
        ({"microbatches": 0}, r"microbatches must be an integer ≥ 1"),
    ],
)
def test_pipeline_options_are_checked_when_built(options, match):
    with pytest.raises(ValueError, match=match):
        PipelineParallel(**options)


def test_balanced_starts_needs_a_layer_per_stage():
    with pytest.raises(ValueError, match="3 layers cannot make 4 stages"):
        balanced_starts([1, 2, 3], 4)


# ---------------------------------------------------------------------- tensor parallel


def test_default_plans_split_attention_feed_forward_and_mlp_pairs():
    plan = default_plan(transformer())
    assert plan["block0.attn.q"] == plan["block0.attn.k"] == plan["block0.attn.v"] == "colwise"
    assert plan["block0.attn.proj"] == "rowwise"
    assert (plan["block1.mlp.fc1"], plan["block1.mlp.fc2"]) == ("colwise", "rowwise")
    assert "head" not in plan  # the vocabulary projection stays whole
    assert default_plan(models.small_cnn(3, 4, hidden=32)) == {"8": "colwise", "10": "rowwise"}


@pytest.mark.parametrize(
    ("plan", "model", "config", "match"),
    [
        ({"head": "diagonal"}, transformer, {}, r"gives 'head' style 'diagonal'; allowed values: 'colwise'"),
        ({"block0.ln1": "colwise"}, transformer, {}, r"names 'block0.ln1', a LayerNorm; only Linear layers"),
        (
            {"head": "colwise"},
            transformer,
            {},
            r"'head' \(colwise, Linear 32→37\) has 37 output features, which do not divide among 2 ranks; no "
            r"count of 2 to 16 ranks does, or leave 'head' out of the plan",
        ),
        (
            None,
            lambda: models.transformer_lm(37, 8, d_model=48, n_heads=3),
            {},
            r"has n_heads=3, which does not divide among 2 ranks .*a multiple of 2 heads",
        ),
        (None, lambda: models.linear(3), {}, r"no tensor-parallel plan found for Linear"),
        (None, transformer, {"precision": "fp16"}, r"precision='fp16' is not supported with tensor parallel"),
    ],
)
def test_tensor_parallel_refuses(plan, model, config, match):
    with pytest.raises(ValueError, match=match):
        TensorParallel(plan).validate(model(), TrainConfig(**config), world_size=2)


def test_a_layer_that_does_not_split_names_the_rank_counts_that_would():
    model = models.transformer_lm(37, 8, d_model=48, n_heads=3)
    with pytest.raises(ValueError, match=r"\(rowwise, Linear 192→48\) has 192 input features, which do not "):
        TensorParallel({"block0.mlp.fc2": "rowwise"}).validate(model, TrainConfig(), world_size=5)
    with pytest.raises(ValueError, match=r"among 5 ranks; split it over 2 or 3 or 4 or 6 ranks, or leave"):
        TensorParallel({"block0.mlp.fc2": "rowwise"}).validate(model, TrainConfig(), world_size=5)


def test_tensor_plan_styles_are_checked_without_a_model_and_must_be_a_mapping():
    with pytest.raises(ValueError, match="style 'both'"):
        TensorParallel({"fc": "both"}).validate(None, TrainConfig(), world_size=2)
    with pytest.raises(ValueError, match="plan must map module names"):
        TensorParallel(["fc1", "fc2"])


# ---------------------------------------------------------------------- FSDP and launch


def test_fsdp_refuses_cpu_offload_without_gpus_fp16_and_bad_units():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"cpu_offload=True needs GPUs \(nccl\)"):
            FullyShardedDataParallel(cpu_offload=True).validate(None, TrainConfig(), world_size=2)
    with pytest.raises(ValueError, match=r"precision='fp16' is not supported with FSDP"):
        FullyShardedDataParallel().validate(None, TrainConfig(precision="fp16"), world_size=2)
    with pytest.raises(ValueError, match="units must be a list of submodule names"):
        FullyShardedDataParallel(units="block0")


def test_launch_takes_only_distributed_strategies():
    with pytest.raises(ValueError, match=r"strategy must be a distributed strategy \(DataParallel\(\)"):
        launch(lambda s: None, 2, strategy=SingleDevice("cpu"))


def test_an_unbound_strategy_says_where_it_will_run():
    assert PipelineParallel(schedule="gpipe", microbatches=8).describe() == (
        "not started (bound to a process group by launch, torchrun or the Trainer), "
        "pipeline (GPipe, 8 micro-batches)"
    )


# ---------------------------------------------------------------------- memory


def test_the_activation_peak_counts_what_is_alive_at_once_not_the_sum():
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    one = StepMemoryProbe(model, torch.device("cpu"))
    with one:
        model(torch.ones(32, 256)).sum().backward()
    two = StepMemoryProbe(model, torch.device("cpu"))
    with two:  # two micro-batches, one after the other: the first one's activations are freed by then
        for _ in range(2):
            model(torch.ones(32, 256)).sum().backward()
    both = StepMemoryProbe(model, torch.device("cpu"))
    with both:  # both forwards first (as GPipe does), then both backwards
        losses = [model(torch.ones(32, 256)).sum() for _ in range(2)]
        sum(losses).backward()
    optimizer.step()
    assert one.peak == 2 * 32 * 256 * 4  # the input and the ReLU output
    assert two.peak == one.peak and both.peak == 2 * one.peak
    assert two.live == 0  # everything was released after backward
    report = one.report(optimizer)
    assert report["params"] == report["grads"] == (256 * 256 + 256 + 256 + 1) * 4
    assert report["optimizer_state"] == 0 and report["cuda_peak"] is None
