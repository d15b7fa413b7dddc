"""RunDir and the checkpoint rules, without training: paths, config.json, state round trips, resumes."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.train import OptimizerConfig, SingleDevice, TrainConfig
from workbench.train.run_dir import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    LoopPosition,
    RunDir,
    capture_training_state,
    check_resumable,
    restore_training_state,
)


@pytest.mark.parametrize("bad", ["", "a/b", ".", "..", None, 3])
def test_a_run_name_must_be_a_plain_name(tmp_path, bad):
    with pytest.raises(ValueError, match="run must be a non-empty name without '/'"):
        RunDir.named(bad, runs_dir=tmp_path)


def test_paths_and_config_json(tmp_path):
    run = RunDir.named("exp", runs_dir=tmp_path)
    assert run.path == tmp_path / "exp" and not run.path.exists()  # nothing is created until the run starts
    assert run.checkpoint_path.name == CHECKPOINT_FILE and run.config_path.name == CONFIG_FILE
    config = TrainConfig(epochs=4, optimizer=OptimizerConfig("sgd", lr=0.5))
    run.write_config(config)
    assert TrainConfig.from_dict(json.loads(run.config_path.read_text())) == config


def test_no_checkpoint_until_the_first_save(tmp_path):
    run = RunDir.named("exp", runs_dir=tmp_path)
    assert run.latest_checkpoint() is None
    run.write_config(TrainConfig())
    assert run.latest_checkpoint() is None  # config.json alone is no checkpoint
    run.save({"step": 1})
    assert run.latest_checkpoint() == run.checkpoint_path


def _parts(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_state_round_trip_restores_model_optimizer_position_and_rng(tmp_path):
    strategy = SingleDevice("cpu")
    config = TrainConfig(epochs=3)
    model, optimizer = _parts(seed=0)
    where = LoopPosition(step=7, epoch=1, position=2, lr=0.05, clip_norm=1.0, clip_value=0.0)
    run = RunDir.named("exp", runs_dir=tmp_path)
    path = run.save(capture_training_state(strategy, model, optimizer, None, where, config))
    expected_draw = torch.rand(3)  # what the RNG gives right after the capture

    other_model, other_optimizer = _parts(seed=1)
    restored = restore_training_state(path, strategy, other_model, other_optimizer, None, config)
    assert restored.where == where and restored.changes == {}
    assert torch.rand(3).tolist() == expected_draw.tolist()
    for a, b in zip(model.parameters(), other_model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert other_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_restore_refuses_an_incompatible_config_before_touching_the_model(tmp_path):
    strategy = SingleDevice("cpu")
    model, optimizer = _parts(seed=0)
    where = LoopPosition(3, 0, 3, 0.1, 0.0, 0.0)
    path = RunDir(tmp_path).save(
        capture_training_state(strategy, model, optimizer, None, where, TrainConfig(accumulate=2))
    )
    other, other_optimizer = _parts(seed=1)
    before = [p.clone() for p in other.parameters()]
    with pytest.raises(ValueError, match=r"accumulate was 2 there and is 1 now"):
        restore_training_state(path, strategy, other, other_optimizer, None, TrainConfig())
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))


def test_restore_from_a_missing_file_says_where_it_looked(tmp_path):
    model, optimizer = _parts(seed=0)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*nothing\.pt"):
        restore_training_state(
            tmp_path / "nothing.pt", SingleDevice("cpu"), model, optimizer, None, TrainConfig()
        )


COMPATIBLE = [
    ("same", TrainConfig(), 1, TrainConfig(), 1),
    ("more epochs", TrainConfig(epochs=2), 1, TrainConfig(epochs=5), 1),
    ("another lr", TrainConfig(), 1, TrainConfig(optimizer=OptimizerConfig(lr=0.5)), 1),
    ("same global batch on more ranks", TrainConfig(batch_size=64), 1, TrainConfig(batch_size=32), 2),
    ("same global batch on fewer ranks", TrainConfig(batch_size=16), 4, TrainConfig(batch_size=64), 1),
]
INCOMPATIBLE = [
    ("fewer epochs", TrainConfig(epochs=5), 1, TrainConfig(epochs=2), 1, "epochs was 5 there and is 2"),
    ("another seed", TrainConfig(seed=0), 1, TrainConfig(seed=3), 1, "seed was 0 there and is 3"),
    ("another batch", TrainConfig(batch_size=64), 1, TrainConfig(batch_size=32), 1, "batch_size was 64"),
    ("accumulate", TrainConfig(accumulate=1), 1, TrainConfig(accumulate=4), 1, "accumulate was 1"),
    (
        "another global batch",
        TrainConfig(batch_size=64),
        2,
        TrainConfig(batch_size=64),
        4,
        r"global batch was 64 × 2 data shards = 128 there and is 64 × 4 = 256 now",
    ),
]


@pytest.mark.parametrize(("case", "saved", "saved_shards", "now", "shards"), COMPATIBLE)
def test_compatible_resumes(case, saved, saved_shards, now, shards):
    check_resumable("ckpt.pt", saved, saved_shards, now, shards)


@pytest.mark.parametrize(("case", "saved", "saved_shards", "now", "shards", "message"), INCOMPATIBLE)
def test_incompatible_resumes_name_the_field_and_the_fix(case, saved, saved_shards, now, shards, message):
    with pytest.raises(ValueError, match=f"cannot resume from ckpt.pt: .*{message}"):
        check_resumable("ckpt.pt", saved, saved_shards, now, shards)
