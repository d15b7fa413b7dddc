import pytest

from workbench.presets import build_experiment
from workbench.train import Trainer
from workbench.train.runs import metric_series
from workbench.widgets import RunsBrowser


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for lr, epochs in ((0.03, 1), (0.01, 2), (0.003, 1)):
        e = build_experiment("digits-mlp", epochs=epochs, lr=lr, log_every=1)
        Trainer(e.model, e.loss_fn, e.splits, e.config, run=f"lr={lr}", runs_dir=root).fit()
    return root


def _trace(browser, name):
    return next(t for t in browser.figure.data if t.name == name)


def test_the_selected_runs_are_overlaid_with_what_their_logs_hold(sweep):
    browser = RunsBrowser(sweep)
    assert browser.selected == ["lr=0.03", "lr=0.01", "lr=0.003"]  # the latest three
    assert browser.point_counts() == {"lr=0.03": 23, "lr=0.01": 46, "lr=0.003": 23}
    xs, ys = metric_series(sweep / "lr=0.01", "loss")
    assert list(_trace(browser, "lr=0.01").x) == xs and list(_trace(browser, "lr=0.01").y) == ys
    assert len({t.line.color for t in browser.figure.data}) == 3
    assert "lr=0.003" in browser.table.value and "finished" in browser.table.value


def test_picking_metric_axis_and_smoothing_redraws(sweep):
    browser = RunsBrowser(sweep, select=["lr=0.03", "lr=0.01"])
    options = dict(browser.metric.options)  # the Dashboard's labels → the logged names
    assert {"loss": "loss", "learning rate": "lr", "val accuracy": "val accuracy"}.items() <= options.items()
    assert (
        options["gradient norm (before clipping)"] == "grad_norm" and options["samples/s"] == "samples_per_s"
    )
    browser.metric.value = "val accuracy"  # what picking it in the dropdown does
    assert browser.point_counts() == {"lr=0.03": 1, "lr=0.01": 2}
    assert browser.figure.layout.title.text == "val accuracy of 2 runs"
    browser.metric.value = "grad_norm"
    assert browser.figure.layout.yaxis.title.text == "gradient norm (before clipping)"
    browser.metric.value = "loss"
    browser.x_axis.value = "time"
    assert browser.figure.layout.xaxis.title.text == "seconds since start"
    assert min(_trace(browser, "lr=0.01").x) >= 0
    browser.smoothing.value = 0.8
    raw = _trace(browser, "lr=0.01 raw")
    assert raw.opacity < 0.5 and list(_trace(browser, "lr=0.01").y) != list(raw.y)
    assert browser.point_counts() == {"lr=0.03": 23, "lr=0.01": 46}


def test_the_diff_shows_only_what_differs_and_needs_two_runs(sweep):
    browser = RunsBrowser(sweep, select=["lr=0.03", "lr=0.01"])
    assert browser.diff() == {"epochs": [1, 2], "optimizer.lr": [0.03, 0.01]}
    assert "optimizer.lr" in browser.diff_view.value and "batch_size" not in browser.diff_view.value
    browser.select(["lr=0.03"])
    assert "select two runs" in browser.diff_view.value
    with pytest.raises(ValueError, match="no run 'lr=9' in"):
        browser.select(["lr=9"])


def test_sorting_and_refresh_pick_up_a_new_run(sweep, tmp_path):
    browser = RunsBrowser(sweep)
    browser.sort.value = "steps"
    assert browser.chooser.options[0] == "lr=0.01"  # the most steps first
    e = build_experiment("digits-mlp", epochs=1, lr=0.1)
    Trainer(e.model, e.loss_fn, e.splits, e.config, run="late", runs_dir=sweep).fit()
    browser.refresh()
    assert "late" in browser.chooser.options and "late" not in browser.selected  # the selection is kept
    empty = RunsBrowser(tmp_path / "nothing")
    assert "no runs in" in empty.table.value and empty.point_counts() == {}


def test_a_run_still_training_is_followed_until_it_ends(tmp_path):
    import threading
    import time

    e = build_experiment("digits-mlp", epochs=40, log_every=1)
    trainer = Trainer(e.model, e.loss_fn, e.splits, e.config, run="live", runs_dir=tmp_path)
    training = threading.Thread(target=trainer.fit)
    training.start()
    log = tmp_path / "live" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while (
        not (log.is_file() and log.read_text().count('"event": "step"') >= 3) and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    browser = RunsBrowser(tmp_path, follow_s=0.1)
    first = browser.point_counts()["live"]
    assert [r.status for r in browser.runs] == ["running"] and browser.following
    deadline = time.monotonic() + 60
    while browser.point_counts()["live"] <= first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert browser.point_counts()["live"] > first  # new steps drawn without a click
    training.join()
    deadline = time.monotonic() + 10
    while browser.following and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not browser.following and [r.status for r in browser.runs] == ["finished"]
    assert browser.point_counts()["live"] == 40 * 23


def test_a_refresh_reads_each_log_once_and_only_logs_that_changed(sweep, monkeypatch, tmp_path):
    import shutil

    from workbench.widgets import runs_browser

    runs = tmp_path / "runs"
    shutil.copytree(sweep, runs, ignore=shutil.ignore_patterns("late"))
    read = []
    real = runs_browser.read_run
    monkeypatch.setattr(runs_browser, "read_run", lambda path: read.append(path.name) or real(path))
    browser = RunsBrowser(runs)  # table, metric names and curves of three selected runs
    assert sorted(read) == ["lr=0.003", "lr=0.01", "lr=0.03"]
    read.clear()
    browser.refresh_button.click()
    browser.metric.value = "val accuracy"
    assert read == []  # nothing changed on disk
    log = runs / "lr=0.01" / "metrics.jsonl"
    log.write_text(log.read_text())  # rewritten: a new modification time
    browser.refresh_button.click()
    assert read == ["lr=0.01"]
