"""TrainConfig(compile=...): compiled training gives eager's losses, its compile time is reported apart from
the steps, graph breaks are named, DDP trains compiled, and what cannot compile says so before training."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from workbench import models
from workbench.data import load_dataset, split_dataset
from workbench.parallel import (
    DataParallel,
    FullyShardedDataParallel,
    PipelineParallel,
    TensorParallel,
    launch,
)
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.compilation import describe_compile
from workbench.train.step_time import PHASES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # Inductor's notes on CPU kernels


def _text_splits():
    data = load_dataset("text", n_samples=200, context=16)
    return data, split_dataset(data, (0.8, 0.1, 0.1), seed=0)  # 160 training samples: 10 full batches


def _config(mode: str, **changes) -> TrainConfig:
    optimizer = OptimizerConfig("adamw", lr=3e-3)
    settings = {"epochs": 1, "batch_size": 16, "log_every": 1, "optimizer": optimizer, **changes}
    return TrainConfig(compile=mode, **settings)


class _Steps:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def on_step(self, event: dict) -> None:
        self.events.append(event)


@pytest.fixture(scope="module")
def eager_and_compiled():
    """The same 10 steps of a small GPT, eager and compiled (one compile for the module's tests)."""
    data, splits = _text_splits()
    torch.compiler.reset()  # compile here, whatever earlier tests compiled in this process
    runs = {}
    for mode in ("off", "default"):
        torch.manual_seed(0)
        model = models.transformer_lm(data.num_classes, 16, d_model=32, n_heads=2, n_layers=1)
        steps = _Steps()
        trainer = Trainer(model, models.next_token_loss, splits, _config(mode), callbacks=[steps])
        runs[mode] = (trainer, trainer.fit(), steps.events)
    return runs


def test_compiled_training_gives_eager_losses_to_1e_5_over_ten_steps(eager_and_compiled):
    eager, compiled = eager_and_compiled["off"][2], eager_and_compiled["default"][2]
    assert len(eager) == len(compiled) == 10
    for before, after in zip(eager, compiled, strict=True):
        assert after["loss"] == pytest.approx(before["loss"], rel=1e-5, abs=1e-7)
    eager_val = eager_and_compiled["off"][1].metrics["val"]["loss"]
    assert eager_and_compiled["default"][1].metrics["val"]["loss"] == pytest.approx(eager_val, rel=1e-5)


def test_compile_time_is_reported_apart_from_the_steps(eager_and_compiled):
    trainer, _, events = eager_and_compiled["default"]
    report = trainer.compile_report
    assert report["seconds"] > 0 and report["compiles"] >= 1 and report["graphs"] >= 1
    assert report["graph_breaks"] == 0 and report["break_reasons"] == []
    first, later = events[0], events[1:]
    # the first step compiled: that time is set aside, not counted as its forward or in its total
    assert first["step_time"]["compiling"] > 0
    assert first["step_time"]["total"] < first["step_time"]["compiling"]
    assert sum(first["step_time"][phase] for phase in PHASES) == pytest.approx(first["step_time"]["total"])
    assert all("compiling" not in event["step_time"] for event in later)  # one shape: compiled once
    assert all(event["compile"] == report for event in later)  # the totals ride every logged step
    # throughput leaves the compile out: the first window's time (its 16 samples at its samples_per_s) is
    # the step's time without its compiling, which it would otherwise hold whole
    window = 16 / first["samples_per_s"]
    assert window < first["step_time"]["total"] + 0.5 * first["step_time"]["compiling"]
    assert trainer.model.state_dict().keys() == eager_and_compiled["off"][0].model.state_dict().keys()


class _Breaks(torch.nn.Module):
    """A model whose forward asks for a graph break (as a print, a .item() branch or a numpy call would)."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.first(x).relu()
        torch._dynamo.graph_break()
        return self.second(hidden)


def test_graph_breaks_are_counted_and_named():
    torch.compiler.reset()
    x = torch.randn(64, 4)
    data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
    trainer = Trainer(_Breaks(), torch.nn.functional.cross_entropy, data, _config("default", batch_size=32))
    trainer.fit()
    report = trainer.compile_report
    assert report["graph_breaks"] >= 1 and report["graphs"] >= 2
    assert any("graph_break" in reason for reason in report["break_reasons"]), report["break_reasons"]


def test_a_machine_without_a_c_compiler_is_refused_with_the_fix(tmp_path):
    script = textwrap.dedent(
        """
        import torch
        from workbench import models
        from workbench.train import TrainConfig, Trainer
        x = torch.randn(8, 4)
        Trainer(models.linear(4), torch.nn.functional.mse_loss, torch.utils.data.TensorDataset(x, x[:, :1]),
                TrainConfig(compile="default", device="cpu"))
        """
    )
    env = {"CXX": str(tmp_path / "no-such-g++"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("workbench.train.compilation.CompilerMissingError: compile='default' needs")
    assert "apt install g++" in last and "compile='off'" in last


def test_config_names_the_modes():
    with pytest.raises(ValueError, match="compile must be a mode name, got True; use compile='default'"):
        TrainConfig(compile=True)
    with pytest.raises(ValueError, match="compile='fast' is not supported; allowed values: 'off', 'default'"):
        TrainConfig(compile="fast")
    assert TrainConfig.from_dict(TrainConfig(compile="default").to_dict()).compile == "default"


@pytest.mark.parametrize(
    "strategy",
    [PipelineParallel(), FullyShardedDataParallel(), TensorParallel({"2": "colwise"})],
    ids=["pipeline", "fsdp", "tensor-parallel"],
)
def test_strategies_that_cannot_run_compiled_say_so_before_training(strategy):
    with pytest.raises(
        ValueError, match=r"compile='default' is not supported with \w+ \(.*use compile='off'"
    ):
        strategy.validate(models.mlp(8, 2, hidden=(8, 8)), TrainConfig(batch_size=8, compile="default"), 2)


def _train_ddp(strategy, mode: str) -> list[float]:
    torch.manual_seed(0)
    data, splits = _text_splits()
    model = models.transformer_lm(data.num_classes, 16, d_model=32, n_heads=2, n_layers=1)
    steps = _Steps()
    config = _config(mode, batch_size=8)  # 8 per rank: the same 10 steps of 16 as one process
    trainer = Trainer(model, models.next_token_loss, splits, config, strategy=strategy, callbacks=[steps])
    trainer.fit()
    compiled = trainer.compile_report
    return [e["loss"] for e in steps.events], [e["step_time"] for e in steps.events], compiled


def test_data_parallel_trains_compiled_with_eager_losses_and_its_all_reduce_timed():
    eager, _, _ = launch(_train_ddp, 2, args=("off",), strategy=DataParallel(), verbose=False)
    compiled, times, report = launch(_train_ddp, 2, args=("default",), strategy=DataParallel(), verbose=False)
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-7)
    assert report["seconds"] > 0 and report["graphs"] >= 1
    # DDP's buckets are still all-reduced through the timed hook: communication measured on later steps
    assert sum(step["comm"] + step["comm_overlapped"] for step in times[1:]) > 0


def test_a_fit_that_reuses_graphs_compiled_earlier_says_so():
    x = torch.randn(64, 4)
    data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
    config = _config("default", batch_size=32)
    torch.manual_seed(0)
    first = Trainer(
        torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.nn.functional.cross_entropy, data, config
    )
    first.fit()
    again = Trainer(
        torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.nn.functional.cross_entropy, data, config
    )
    again.fit()  # another model of the same shapes: TorchDynamo's guards pass, nothing compiles
    assert first.compile_report["compiles"] >= 1 and again.compile_report["compiles"] == 0
    assert describe_compile(again.compile_report).startswith("nothing compiled: graphs compiled earlier")
