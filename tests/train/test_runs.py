"""Runs read back from their logs: status (also of a killed run and a live one), steps, best, config diff."""

import os
import signal
import subprocess
import sys
import time

import pytest

from workbench.cli import main
from workbench.presets import build_experiment
from workbench.train import Trainer, read_metrics
from workbench.train.run_lock import LOCK_FILE, RunLock
from workbench.train.runs import _seconds_text, config_diff, list_runs, metric_names, metric_series


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A single-process run, a 2-process DDP run, and a run whose process was killed mid-training."""
    from workbench.parallel import launch

    root = tmp_path_factory.mktemp("runs")
    e = build_experiment("digits-mlp", epochs=2, lr=0.01)
    Trainer(e.model, e.loss_fn, e.splits, e.config, run="single", runs_dir=root).fit()
    d = build_experiment("digits-mlp", epochs=2, batch_size=16)

    def train(strategy):
        return Trainer(
            d.model, d.loss_fn, d.splits, d.config, strategy=strategy, run="ddp", runs_dir=root
        ).fit()

    launch(train, 2, verbose=False)
    killed = subprocess.Popen(
        [sys.executable, "-m", "workbench", "train", "digits-mlp", "--epochs", "500", "--run", "killed",
         "--runs-dir", str(root)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log = root / "killed" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (log.is_file() and '"event": "step"' in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    return root


def test_each_run_is_summarised_from_its_log(runs):
    by_name = {run.name: run for run in list_runs(runs)}
    assert list(by_name) == ["single", "ddp", "killed"]  # oldest first
    single, ddp, killed = by_name["single"], by_name["ddp"], by_name["killed"]
    assert (single.status, single.world_size) == ("finished", 1) and single.steps == 2 * 23
    assert (ddp.status, ddp.world_size) == ("finished", 2) and ddp.strategy.startswith("2 processes")
    assert killed.status == "killed" and killed.steps > 0  # no fit_end, and nobody holds the run
    end = read_metrics(runs / "single", kind="fit_end")[0]
    evals = [e["accuracy"] for e in read_metrics(runs / "single", kind="eval") if e["split"] == "val"]
    assert single.best == ("accuracy", max(evals)) and end["val"]["accuracy"] in evals
    assert single.wall_s is not None and single.wall_s > 0


def test_a_run_held_by_a_live_process_is_running(runs):
    with RunLock(runs / "killed"):
        assert {r.name: r.status for r in list_runs(runs)}["killed"] == "running"
    assert (runs / "killed" / LOCK_FILE).read_text() == ""


def test_the_diff_shows_exactly_the_fields_that_differ(runs):
    by_name = {run.name: run for run in list_runs(runs)}
    assert config_diff([by_name["single"], by_name["ddp"]]) == {
        "batch_size": [64, 16],
        "global batch": [64, 32],  # what the launch made of batch_size: 16 on each of 2 ranks
        "optimizer.lr": [0.01, 0.003],
        "ranks": [1, 2],
        "strategy": ["1 process on cpu", by_name["ddp"].strategy],
    }
    assert config_diff([by_name["single"], by_name["single"]]) == {}


def test_a_metric_series_is_what_the_log_holds(runs):
    steps = [e for e in read_metrics(runs / "ddp", kind="step") if e["rank"] == 0]
    assert {"loss", "lr", "samples_per_s", "val accuracy", "test loss"} <= set(metric_names(runs / "ddp"))
    xs, ys = metric_series(runs / "ddp", "loss")
    assert xs == [e["step"] for e in steps] and ys == [e["loss"] for e in steps]
    seconds, _ = metric_series(runs / "ddp", "loss", x="time")
    assert seconds == sorted(seconds) and seconds[0] >= 0
    val_x, val_y = metric_series(runs / "ddp", "val accuracy")
    assert len(val_x) == 2 and all(0 <= v <= 1 for v in val_y)
    with pytest.raises(ValueError, match="x='epoch' is not supported"):
        metric_series(runs / "ddp", "loss", x="epoch")


def test_workbench_runs_prints_the_table_and_a_diff(runs, capsys):
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name in ("single", "ddp", "killed", "finished", "best val"))
    assert main(["runs", "--runs-dir", str(runs), "--diff", "single", "ddp"]) == 0
    diff = capsys.readouterr().out
    assert "optimizer.lr" in diff and "batch_size" in diff and "epochs" not in diff
    assert all(derived in diff for derived in ("global batch", "ranks", "strategy", "setting"))
    assert main(["runs", "--runs-dir", str(runs), "--diff", "single", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    (runs / "notes").mkdir()  # a folder that is no run: said, not "no run" alone
    assert main(["runs", "--runs-dir", str(runs), "--diff", "single", "notes"]) == 2
    assert f"no run 'notes' in {runs} ({runs / 'notes'} holds no metrics.jsonl" in capsys.readouterr().err
    assert main(["runs", "--runs-dir", str(runs / "none")]) == 2


def test_workbench_runs_lists_and_diffs_without_importing_torch(runs):
    code = (
        "import sys; from workbench.cli import main; "
        f"assert main(['runs', '--runs-dir', {str(runs)!r}]) == 0; "
        f"assert main(['runs', '--runs-dir', {str(runs)!r}, '--diff', 'single', 'ddp']) == 0; "
        "assert 'torch' not in sys.modules, 'workbench runs imported torch'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # ~0.15 s instead of torch's ~2 s on 2 CPU cores
    assert "single" in done.stdout and "optimizer.lr" in done.stdout


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.04123, "0.0412 s"), (12.34, "12.3 s"), (999.4, "999 s"), (4321.2, "4,321 s")]
)
def test_the_wall_time_column_keeps_three_digits_so_a_short_run_is_not_zero(seconds, shown):
    assert _seconds_text(seconds) == shown


def test_runs_of_other_models_or_data_under_one_config_differ_in_the_diff_and_the_table(tmp_path, capsys):
    """The same TrainConfig on a wider layer, another activation, or less data: the config alone read the
    same ("have the same settings"); the fit's start records the model and the samples of each split."""
    import torch

    from workbench.data import Splits, load_dataset, split_dataset

    splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    fewer = Splits(splits.train.subset(torch.arange(500)), splits.val, splits.test)
    config = build_experiment("digits-mlp", epochs=1).config

    def mlp(width, activation=torch.nn.ReLU):
        torch.manual_seed(0)
        layers = torch.nn.Flatten(), torch.nn.Linear(64, width), activation(), torch.nn.Linear(width, 10)
        return torch.nn.Sequential(*layers)

    loss = torch.nn.functional.cross_entropy
    for name, model, data in [
        ("narrow", mlp(32), splits), ("wide", mlp(64), splits), ("tanh", mlp(32, torch.nn.Tanh), splits),
        ("fewer", mlp(32), fewer),
    ]:  # fmt: skip
        Trainer(model, loss, data, config, run=name, runs_dir=tmp_path, progress=False).fit()
    by_name = {run.name: run for run in list_runs(tmp_path)}
    narrow, wide, tanh = (by_name[name].settings()["model"] for name in ("narrow", "wide", "tanh"))
    assert narrow.startswith("Sequential, 2,410 parameters (#") and wide.startswith("Sequential, 4,810 ")
    assert config_diff([by_name["narrow"], by_name["wide"]]) == {"model": [narrow, wide]}
    assert config_diff([by_name["narrow"], by_name["tanh"]]) == {"model": [narrow, tanh]}  # same count
    assert narrow.split("(")[0] == tanh.split("(")[0]
    assert config_diff([by_name["narrow"], by_name["fewer"]]) == {"samples.train": [len(splits.train), 500]}
    assert main(["runs", "--runs-dir", str(tmp_path), "--diff", "narrow", "tanh"]) == 0
    assert "model " in capsys.readouterr().out  # not "have the same settings"
    assert main(["runs", "--runs-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "model" in table[0].split() and "Sequential 4.81k" in next(r for r in table if "wide" in r)
