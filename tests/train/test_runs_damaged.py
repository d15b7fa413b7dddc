"""`workbench runs`, `--diff` and `RunsBrowser` over a runs folder where one run's files are damaged or were
written by something else: the other runs still list, and the damaged one shows what it can or is skipped
with the reason (issue 44: each case below crashed the whole listing)."""

from __future__ import annotations

import json

import pytest

from workbench import cli
from workbench.train import runs as runs_module
from workbench.train.runs import config_diff, list_runs, metric_names, metric_series


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    from workbench.presets import build_experiment
    from workbench.train import Trainer

    root = tmp_path_factory.mktemp("runs")
    e = build_experiment("regression-linear", epochs=1)
    Trainer(e.model, e.loss_fn, e.splits, e.config, run="good", runs_dir=root).fit()
    return root / "good"


def _edited(lines, change):
    out = []
    for line in lines:
        event = json.loads(line)
        change(event)
        out.append(json.dumps(event))
    return out


DAMAGE = {
    "no-status": (lambda ev: ev.pop("status", None), None, "unknown"),
    "step-abc": (lambda ev: ev.update(step="abc") if "step" in ev else None, None, "finished"),
    "time-infinity": (lambda ev: ev.update(time=float("inf")), None, "finished"),
    "time-string": (lambda ev: ev.update(time="noon"), None, "finished"),
    "world-size-string": (
        lambda ev: ev.update(world_size="two") if "world_size" in ev else None,
        None,
        "finished",
    ),
    "config-list": (lambda ev: None, "[1, 2]", "finished"),
    "config-null": (lambda ev: None, "null", "finished"),
}


@pytest.fixture(scope="module")
def damaged(good_run):
    root = good_run.parent
    lines = (good_run / "metrics.jsonl").read_text().splitlines()
    for name, (change, config, _) in DAMAGE.items():
        folder = root / name
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("\n".join(_edited(lines, change)) + "\n")
        (folder / "config.json").write_text(config or (good_run / "config.json").read_text())
    return root


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_run_lists_beside_the_others_with_what_can_be_read(damaged, name):
    by_name = {run.name: run for run in list_runs(damaged)}
    assert set(by_name) == {"good", *DAMAGE}
    run = by_name[name]
    assert run.status == DAMAGE[name][2]
    assert all(isinstance(cell, str) for cell in run.row())
    for metric in metric_names(run.path):
        for x in ("step", "time"):
            xs, ys = metric_series(run.path, metric, x=x)
            assert len(xs) == len(ys) and all(isinstance(v, float) for v in xs)
    assert isinstance(config_diff([by_name["good"], run]), dict)


def test_the_command_lists_and_diffs_them_and_names_a_skipped_run(damaged, monkeypatch, capsys):
    assert cli.main(["runs", "--runs-dir", str(damaged)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("good", *DAMAGE))
    assert cli.main(["runs", "--runs-dir", str(damaged), "--diff", "good", "config-list"]) == 0
    assert "optimizer.lr" in capsys.readouterr().out

    summarize = runs_module.summarize_run

    def fails_for_one(path, events=None):
        if path.name == "no-status":
            raise PermissionError(13, "Permission denied")
        return summarize(path, events)

    monkeypatch.setattr(runs_module, "summarize_run", fails_for_one)
    assert cli.main(["runs", "--runs-dir", str(damaged)]) == 0
    captured = capsys.readouterr()
    assert "good" in captured.out and "no-status" not in captured.out
    assert (
        captured.err
        == "workbench runs: skipped no-status: its metrics.jsonl cannot be read (Permission denied)\n"
    )


def test_the_runs_browser_draws_them(damaged):
    from workbench.widgets import RunsBrowser

    browser = RunsBrowser(runs_dir=damaged)
    assert {run.name for run in browser.runs} == {"good", *DAMAGE}
    assert isinstance(browser.diff(), dict)
