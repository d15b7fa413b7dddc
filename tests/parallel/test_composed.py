"""Parallelisms composed on one device mesh ("fsdp+tp", "ddp+tp", "ddp+pp"), 4 gloo ranks vs one process.

A 2 × 2 mesh: two tensor-parallel pairs (or two 2-stage pipelines), each a data shard. The small transformer
LM and the CNN (2 micro-batches accumulated per step, so the skipped gradient sync is checked too; every case
clips by global norm, over DTensors on two meshes) must give the logged loss of every step, the final
parameters and the evaluation of one process on the same global batches, to 1e-4 (relative); each rank's
measured parameter and optimizer bytes must be what the memory estimator says for the composition.
"""

from __future__ import annotations

import functools

import pytest

from tests.parallel.test_model_parallel import TOLERANCE, Recorder, case, relative_difference, single
from workbench.estimate import estimate_memory
from workbench.estimate.profile import profile_model
from workbench.parallel import launch
from workbench.parallel.strategies.composed import ComposedParallel, parse_composition
from workbench.parallel.strategies.registry import strategy_spec
from workbench.train import TrainConfig, Trainer

RANKS, TP = 4, 2


@functools.cache
def composed(name: str, composition: str):
    c = case(name)
    config = c.config.replace(batch_size=c.config.batch_size // (RANKS // TP))  # a data shard's share

    def train(strategy):
        return Trainer(c.model(), c.loss_fn, c.splits, config, strategy=strategy).fit()

    recorder, model = Recorder(), c.model()
    inner = {"pp": TP, "microbatches": 4} if composition == "ddp+pp" else {"tp": TP}
    strategy = strategy_spec(composition).load()(**inner)  # as --strategy builds it
    result = launch(
        train, RANKS, strategy=strategy, model=model, config=config, callbacks=[recorder], verbose=False
    )
    return recorder, model.state_dict(), result


@pytest.mark.parametrize("composition", ["fsdp+tp", "ddp+tp", "ddp+pp"])
@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_a_composition_trains_as_one_process(name, composition):
    reference, expected, one = single(name)
    recorder, trained, result = composed(name, composition)
    assert result.status == "finished" and len(recorder.losses) == len(reference.losses) > 5
    for step, (a, b) in enumerate(zip(reference.losses, recorder.losses, strict=True), start=1):
        assert abs(a - b) <= TOLERANCE * abs(a), f"step {step}: loss {b} vs {a} in one process"
    initial = case(name).model().state_dict()
    assert max(relative_difference(initial[k], expected[k]) for k in expected) > 100 * TOLERANCE
    assert trained.keys() == expected.keys()
    for key in expected:
        assert relative_difference(expected[key], trained[key]) <= TOLERANCE, key
    for split in ("val", "test"):
        for metric, value in one.metrics[split].items():
            assert result.metrics[split][metric] == pytest.approx(value, rel=TOLERANCE), (split, metric)


@pytest.mark.parametrize("composition", ["fsdp+tp", "ddp+tp", "ddp+pp"])
def test_each_rank_holds_what_the_estimator_says_for_the_composition(composition):
    c = case("cnn")
    recorder, _, _ = composed("cnn", composition)
    model = c.model()
    x = c.splits.train.features[:1]
    profile = profile_model(model, x)
    estimate = estimate_memory(profile, batch_size=4, strategy=composition, devices=RANKS, tp=TP, pp=TP)
    whole = sum(p.numel() for p in model.parameters()) * 4
    assert sorted(recorder.memory) == list(range(RANKS))
    held = {rank: (memory["params"], memory["optimizer_state"]) for rank, memory in recorder.memory.items()}
    if composition == "ddp+pp":  # a pipeline's 2 stages partition the model, the same in each replica; the
        assert held[0][0] + held[1][0] == whole and [held[0], held[1]] == [held[2], held[3]]
        # estimator's rule is the balanced split, the mean of the stages (the CNN's layers split 67/33)
        held = {rank: ((held[0][0] + held[1][0]) / 2, (held[0][1] + held[1][1]) / 2) for rank in held}
    for rank, (params, state) in held.items():
        # every Linear of the CNN's head is in the tensor-parallel plan; its convolutions are replicated
        assert params == pytest.approx(estimate.params, rel=0.02), rank
        assert state == pytest.approx(estimate.optimizer_state, rel=0.02), rank
        assert params < (0.9 if composition == "ddp+tp" else 0.6) * whole


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("fsdp+ddp", "splits the data twice"),
        ("tp+tp", "has no data dimension"),
        ("fsdp+pp", "FSDP over pipeline stages is not built here"),
        ("fsdp", "not a composition"),
    ],
)
def test_a_composition_that_cannot_work_is_refused_naming_the_fix(name, message):
    with pytest.raises(ValueError, match=message) as refused:
        parse_composition(name)
    assert "'fsdp+tp'" in str(refused.value) or "'ddp+pp'" in str(refused.value)


def test_the_registry_builds_the_compositions_and_checks_the_mesh_before_anything_starts():
    strategy = strategy_spec("fsdp+tp").load()(tp=2)
    assert isinstance(strategy, ComposedParallel) and strategy.data_dim == "fsdp"
    with pytest.raises(ValueError, match="divisible by 2, got 3"):
        strategy.validate(case("cnn").model(), TrainConfig(), world_size=3)
    with pytest.raises(ValueError, match="divisible by 2, got 3"):
        estimate_memory(1000, activation_bytes_per_sample=0, batch_size=1, strategy="ddp+tp", devices=3)
