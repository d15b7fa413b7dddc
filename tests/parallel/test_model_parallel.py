"""Pipeline (GPipe, 1F1B), tensor parallel and FSDP2 on 2 gloo processes against one process.

Each strategy trains the small transformer LM and the CNN (with an MLP head) from the same seed as a
single-process Trainer; the logged loss of every step and the final parameters must agree to 1e-4
(relative). The CNN cases accumulate 2 micro-batches per step and every case clips by global norm, so the
cross-rank gradient norm and the gradient-sync skipping are checked too.
"""

from __future__ import annotations

import functools
import multiprocessing
import time
from dataclasses import dataclass, field

import pytest
import torch

from workbench import models
from workbench.data import load_dataset, split_dataset
from workbench.parallel import launch
from workbench.parallel.strategies.fsdp import FullyShardedDataParallel
from workbench.parallel.strategies.pipeline import PipelineParallel
from workbench.parallel.strategies.tensor_parallel import TensorParallel
from workbench.parallel.strategies.timeline import StepTimeline
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.events import Callback
from workbench.train.step_time import PHASES

RANKS = 2
TOLERANCE = 1e-4


@dataclass
class Recorder(Callback):
    """Rank 0's logged losses, every rank's memory report and pipeline timelines."""

    losses: list[float] = field(default_factory=list)
    memory: dict[int, dict] = field(default_factory=dict)
    timelines: dict[int, list[dict]] = field(default_factory=dict)  # step → one payload per stage
    step_times: dict[int, list[dict]] = field(default_factory=dict)  # rank → its logged steps' step_time
    models: list[dict] = field(default_factory=list)  # the model each fit_start logged

    def on_fit_start(self, info):
        self.models.append(info["model"])

    def on_step(self, metrics):
        if "step_time" in metrics:
            self.step_times.setdefault(metrics["rank"], []).append(metrics["step_time"])
        if metrics["rank"] == 0:
            self.losses.append(metrics["loss"])
        if "memory" in metrics:
            self.memory[metrics["rank"]] = metrics["memory"]
        if "timeline" in metrics:
            self.timelines.setdefault(metrics["step"], []).append(metrics["timeline"])


@dataclass(frozen=True)
class Case:
    name: str
    model: object  # () -> nn.Module, seeded
    splits: object
    loss_fn: object
    config: TrainConfig


@functools.cache
def case(name: str) -> Case:
    adamw = OptimizerConfig("adamw", lr=3e-3)
    if name == "transformer":
        data = load_dataset("text", n_samples=192, context=16)
        splits = split_dataset(data, (0.75, 0.125, 0.125), seed=0)

        def model():
            torch.manual_seed(0)
            return models.transformer_lm(data.num_classes, 16, d_model=32, n_heads=4, n_layers=2)

        config = TrainConfig(epochs=1, batch_size=16, optimizer=adamw, log_every=1, clip_norm=1.0)
        return Case(name, model, splits, models.next_token_loss, config)
    data = load_dataset("synthetic_images", n_samples=256, image_size=8, channels=3, num_classes=4)
    splits = split_dataset(data, (0.75, 0.125, 0.125), seed=0)

    def model():
        torch.manual_seed(0)
        return models.small_cnn(3, 4, width=8, hidden=32)

    config = TrainConfig(epochs=1, batch_size=8, optimizer=adamw, log_every=1, clip_norm=1.0, accumulate=2)
    return Case(name, model, splits, torch.nn.functional.cross_entropy, config)


STRATEGIES = {
    "gpipe": lambda: PipelineParallel(schedule="gpipe", microbatches=4),
    "1f1b": lambda: PipelineParallel(schedule="1f1b", microbatches=4),
    "tensor": lambda: TensorParallel(),
    "fsdp": lambda: FullyShardedDataParallel(),
}


@functools.cache
def single(name: str) -> tuple[Recorder, dict, object]:
    """One process on the same global batches: the reference."""
    c = case(name)
    recorder = Recorder()
    model = c.model()
    # on the CPU, as the gloo ranks train (on a GPU machine the Trainer would pick the GPU)
    config = c.config.replace(device="cpu")
    result = Trainer(model, c.loss_fn, c.splits, config, callbacks=[recorder]).fit()
    return recorder, model.state_dict(), result


@functools.cache
def parallel(name: str, strategy: str) -> tuple[Recorder, dict, object]:
    c = case(name)
    # FSDP shards the data like DDP: each rank takes half of every global batch
    config = c.config.replace(batch_size=c.config.batch_size // RANKS) if strategy == "fsdp" else c.config

    def train(strategy):
        return Trainer(c.model(), c.loss_fn, c.splits, config, strategy=strategy).fit()

    recorder, model = Recorder(), c.model()
    result = launch(
        train, RANKS, strategy=STRATEGIES[strategy](), model=model, config=config, callbacks=[recorder]
    )
    return recorder, model.state_dict(), result


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_same_losses_and_parameters_as_one_process(name, strategy):
    reference, expected, _ = single(name)
    recorder, trained, result = parallel(name, strategy)
    assert result.status == "finished"
    assert len(recorder.losses) == len(reference.losses) > 5
    for step, (a, b) in enumerate(zip(reference.losses, recorder.losses, strict=True), start=1):
        assert abs(a - b) <= TOLERANCE * abs(a), f"step {step}: loss {b} vs {a} in one process"
    assert trained.keys() == expected.keys()
    assert recorder.models[0] == reference.models[0]  # the model as given, before the strategy split it
    initial = case(name).model().state_dict()
    moved = max(relative_difference(initial[k], expected[k]) for k in expected)
    assert moved > 100 * TOLERANCE  # training changed the parameters far more than the tolerance
    for key in expected:
        assert relative_difference(expected[key], trained[key]) <= TOLERANCE, key


@pytest.mark.parametrize("name", ["transformer", "cnn"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_evaluation_matches_one_process(name, strategy):
    _, _, expected = single(name)
    _, _, result = parallel(name, strategy)
    for split in ("val", "test"):
        for metric, value in expected.metrics[split].items():
            assert result.metrics[split][metric] == pytest.approx(value, rel=TOLERANCE), (split, metric)


def test_fsdp_keeps_at_most_0_6_of_the_parameter_and_optimizer_memory_per_rank():
    reference, _, _ = single("transformer")
    recorder, _, _ = parallel("transformer", "fsdp")
    whole = reference.memory[0]["params"] + reference.memory[0]["optimizer_state"]
    assert sorted(recorder.memory) == [0, 1]
    for rank, memory in recorder.memory.items():
        share = (memory["params"] + memory["optimizer_state"]) / whole
        assert share <= 0.6, f"rank {rank} holds {share:.2f} of the single-process figure"
        assert memory["grads"] <= 0.6 * reference.memory[0]["grads"]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_rank_reports_where_its_logged_steps_time_went(strategy):
    recorder, _, _ = parallel("transformer", strategy)
    assert sorted(recorder.step_times) == [0, 1]
    for times in recorder.step_times.values():
        assert len(times) == len(recorder.losses)  # every logged step (log_every=1)
        for parts in times:
            assert sum(parts[phase] for phase in PHASES) == pytest.approx(parts["total"])
            assert min(parts[phase] for phase in PHASES) >= 0 and parts["forward"] > 0
        if strategy in ("gpipe", "1f1b"):  # a stage's sends, receives and waits for its neighbour
            split = [parts for parts in times if "note" not in parts]
            assert len(split) == len(times) - 1  # the first step, with shape inference, says it is not split
            assert "shape inference" in times[0]["note"]
            assert all(parts["comm"] > 0 and parts["backward"] > 0 for parts in split)
        elif strategy == "fsdp":  # all-gathers and reduce-scatters timed call by call (synchronous on CPU)
            assert all(parts["comm"] > 0 and "note" not in parts for parts in times)
        else:  # tensor parallel's collectives run inside forward and backward: said, not split
            assert all("forward and backward" in parts["note"] for parts in times)


def test_pipeline_stages_hold_their_own_layers_and_1f1b_keeps_fewer_activations_than_gpipe():
    reference, _, _ = single("transformer")
    gpipe, _, _ = parallel("transformer", "gpipe")
    one_f_one_b, _, _ = parallel("transformer", "1f1b")
    stages = [gpipe.memory[rank]["params"] for rank in range(RANKS)]
    assert sum(stages) == reference.memory[0]["params"]  # the stages partition the model
    assert max(stages) < reference.memory[0]["params"]
    # stage 0 of GPipe holds all 4 micro-batches' activations before the first backward; 1F1B at most 2
    assert one_f_one_b.memory[0]["activations"] < 0.75 * gpipe.memory[0]["activations"]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_reports_a_timeline_of_every_stage_at_every_logged_step(schedule):
    recorder, _, _ = parallel("transformer", schedule)
    assert recorder.timelines
    for payloads in recorder.timelines.values():
        timeline = StepTimeline.from_payloads(payloads)
        assert timeline.stages == RANKS and timeline.microbatches == 4
        kinds = sorted((span.stage, span.kind, span.microbatch) for span in timeline.spans)
        assert kinds == sorted((s, k, m) for s in range(RANKS) for k in "FB" for m in range(4))
        assert 0 < timeline.bubble < 1
    assert timeline.ideal_bubble == pytest.approx(1 / 5)  # (p − 1) / (m + p − 1) with p = 2, m = 4


def test_a_pipeline_checkpoint_resumes_where_it_stopped(tmp_path):
    """Epoch 1 with a pipeline, epoch 2 resumed from its checkpoint, equals two epochs in one process."""
    c = case("transformer")
    config = c.config.replace(epochs=2)

    def train(strategy, epochs, resume):
        trainer = Trainer(
            c.model(), c.loss_fn, c.splits, config.replace(epochs=epochs), strategy=strategy, run="pp",
            runs_dir=tmp_path,
        )  # fmt: skip
        return trainer.fit(resume=resume)

    strategy = PipelineParallel(microbatches=4)
    launch(train, RANKS, args=(1, False), strategy=strategy, config=config.replace(epochs=1), verbose=False)
    model = c.model()
    result = launch(
        train, RANKS, args=(2, True), strategy=strategy, model=model, config=config, verbose=False
    )
    assert result.step == 2 * 9 and result.epoch == 2
    expected = c.model()
    Trainer(expected, c.loss_fn, c.splits, config).fit()
    for key, value in expected.state_dict().items():
        assert relative_difference(value, model.state_dict()[key]) <= TOLERANCE, key


def test_an_fsdp_checkpoint_holds_the_whole_model_and_resumes_in_one_process(tmp_path):
    c = case("transformer")
    half = c.config.replace(batch_size=c.config.batch_size // RANKS)

    def train(strategy):
        return Trainer(
            c.model(), c.loss_fn, c.splits, half, strategy=strategy, run="fsdp", runs_dir=tmp_path
        ).fit()

    launch(train, RANKS, strategy=FullyShardedDataParallel(), config=half, verbose=False)
    state = torch.load(tmp_path / "fsdp" / "checkpoint.pt", weights_only=True)
    assert state["model"].keys() == c.model().state_dict().keys()
    assert all(type(v) is torch.Tensor for v in state["model"].values())  # whole tensors, no DTensors
    # one process must take the same global batch: 2 shards × 8 = 16
    with pytest.raises(ValueError, match=r"the global batch was 8 × 2 data shards = 16 there and is 8 × 1"):
        Trainer(c.model(), c.loss_fn, c.splits, half.replace(epochs=2)).fit(
            resume=tmp_path / "fsdp" / "checkpoint.pt"
        )
    # the same global batches in one process continue from it: the step count and the Adam state carry over
    two_epochs = c.config.replace(epochs=2)
    model = c.model()
    resumed = Trainer(model, c.loss_fn, c.splits, two_epochs).fit(resume=tmp_path / "fsdp" / "checkpoint.pt")
    assert resumed.step == 2 * 9
    expected = c.model()
    Trainer(expected, c.loss_fn, c.splits, two_epochs).fit()
    for key, value in expected.state_dict().items():
        assert relative_difference(value, model.state_dict()[key]) <= TOLERANCE, key


# ---------------------------------------------------------------------- refused before any process starts


def refused(strategy, model, config, match):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        launch(lambda s: None, RANKS, strategy=strategy, model=model, config=config)
    assert multiprocessing.active_children() == []
    assert time.perf_counter() - started < 1.0


def test_a_split_point_naming_no_layer_is_refused_before_start():
    refused(
        PipelineParallel(split_points=["block7"]),
        case("transformer").model(),
        TrainConfig(batch_size=16),
        r"split point 'block7' names no layer of the model; its top-level layers are: embed, block0, block1",
    )


def test_more_stages_than_ranks_are_refused_before_start():
    refused(
        PipelineParallel(split_points=["block0", "block1"]),
        case("transformer").model(),
        TrainConfig(batch_size=16),
        r"make 3 stages, more than the 2 ranks; pipeline parallel runs one stage per rank, so give 1 split",
    )
    refused(  # without the model, the count alone
        PipelineParallel(split_points=["a", "b"]),
        None,
        TrainConfig(batch_size=16),
        "make 3 stages, more than",
    )


def test_micro_batches_that_do_not_divide_the_batch_are_refused_before_start():
    refused(
        PipelineParallel(microbatches=3),
        case("transformer").model(),
        TrainConfig(batch_size=16),
        r"microbatches=3 does not divide batch_size=16",
    )


def test_a_tensor_plan_naming_a_missing_module_is_refused_before_start():
    refused(
        TensorParallel({"block0.mlp.fc3": "colwise"}),
        case("transformer").model(),
        TrainConfig(),
        r"the tensor-parallel plan names 'block0.mlp.fc3', which is not a module of the model; its Linear "
        r"layers are: block0.attn.q",
    )


@pytest.mark.parametrize(("strategy", "rule"), [("fsdp", "fsdp"), ("1f1b", "pipeline"), ("tensor", "tensor")])
def test_the_memory_estimate_of_each_strategy_matches_what_its_ranks_hold(strategy, rule):
    """`estimate_memory`'s rules for parameters, gradients and optimizer state per device, against the
    largest rank's measured bytes (within 5%: FSDP pads shards, the balanced stages differ a little, and
    the rule splits every Linear while the plan keeps the output head whole)."""
    from workbench.estimate import estimate_memory

    c = case("transformer")
    batch = c.config.batch_size // RANKS if strategy == "fsdp" else c.config.batch_size
    estimate = estimate_memory(
        c.model(), sample=c.splits.train.features[:1], batch_size=batch, optimizer="adamw", strategy=rule,
        devices=RANKS, micro_batches=4, method="analytic",  # the rules for the state (the peak: traced)
    )  # fmt: skip
    recorder, _, _ = parallel("transformer", strategy)
    state = max(m["params"] + m["grads"] + m["optimizer_state"] for m in recorder.memory.values())
    expected = estimate.params + estimate.grads + estimate.optimizer_state
    assert abs(state - expected) <= 0.05 * expected, (state, expected)
