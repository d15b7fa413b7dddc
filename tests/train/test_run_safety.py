"""Nothing lost, nothing silent: the run directory is one fit's at a time, and resume resumes or refuses."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from workbench.presets import build_experiment
from workbench.train import Trainer, read_metrics
from workbench.train.run_lock import LOCK_FILE, RunInUseError, RunLock

CLI = [sys.executable, "-m", "workbench", "train", "digits-mlp"]


def _digits_trainer(tmp_path, run="r", epochs=1, **options):
    e = build_experiment("digits-mlp", epochs=epochs, **options)
    return Trainer(e.model, e.loss_fn, e.splits, e.config, run=run, runs_dir=tmp_path)


def test_two_trainings_of_one_run_name_from_the_command_line_one_is_refused_and_nothing_is_lost(tmp_path):
    args = ["--run", "same", "--runs-dir", str(tmp_path)]
    first = subprocess.Popen([*CLI, *args, "--epochs", "60"], stderr=subprocess.PIPE, text=True)
    lock = tmp_path / "same" / LOCK_FILE
    deadline = time.monotonic() + 60
    while not (lock.is_file() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    # the first run holds still while the second starts (else a fast machine finishes it first)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = subprocess.run([*CLI, *args, "--epochs", "6", "--seed", "1"], capture_output=True, text=True)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 2
    assert f"is in use: PID {first.pid} on " in second.stderr and "another run name" in second.stderr
    assert "Traceback" not in second.stderr
    starts = read_metrics(tmp_path / "same", kind="fit_start")
    ends = read_metrics(tmp_path / "same", kind="fit_end")
    assert len(starts) == len(ends) == 1 and starts[0]["epochs"] == 60  # the first run, whole
    assert lock.read_text() == ""  # released at the end


def test_a_second_trainer_in_the_same_process_is_refused_while_the_first_fits(tmp_path):
    holder = RunLock(tmp_path / "r")
    holder.acquire()
    try:
        with pytest.raises(RunInUseError, match=rf"is in use: PID {os.getpid()} on "):
            _digits_trainer(tmp_path).fit()
    finally:
        holder.release()
    assert _digits_trainer(tmp_path).fit().status == "finished"  # free again


def test_the_lock_of_a_killed_run_is_taken_over_and_the_takeover_is_said(tmp_path, capsys):
    run_dir = str(tmp_path / "r")
    code = f"from workbench.train.run_lock import RunLock; RunLock({run_dir!r}).acquire(); input()"
    killed = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    lock = tmp_path / "r" / LOCK_FILE
    deadline = time.monotonic() + 30
    while not (lock.is_file() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert _digits_trainer(tmp_path).fit().status == "finished"
    assert f"took over the lock of a run that is gone (PID {killed.pid} on " in capsys.readouterr().err


def test_resuming_with_a_new_lr_and_weight_decay_applies_them_logs_them_and_config_json_agrees(
    tmp_path, capsys
):
    args = ["--run", "lrr", "--runs-dir", str(tmp_path)]
    from workbench.cli import main

    assert main(["train", "digits-mlp", *args, "--epochs", "1", "--lr", "0.003"]) == 0
    resumed = [*args, "--epochs", "2", "--resume", "--lr", "0.0001", "--weight-decay", "0.5"]
    assert main(["train", "digits-mlp", *resumed]) == 0
    assert "with new settings: lr 0.003 → 0.0001, weight_decay 0.0 → 0.5" in capsys.readouterr().err
    steps = read_metrics(tmp_path / "lrr", kind="step")
    assert {s["lr"] for s in steps if s["epoch"] == 0} == {0.003}
    assert {s["lr"] for s in steps if s["epoch"] == 1} == {0.0001}  # the logged lr is the new one
    start = read_metrics(tmp_path / "lrr", kind="fit_start")[1]
    assert start["resume_changes"] == "lr 0.003 → 0.0001, weight_decay 0.0 → 0.5"
    config = __import__("json").loads((tmp_path / "lrr" / "config.json").read_text())
    assert config["optimizer"]["lr"] == 0.0001 and config["optimizer"]["weight_decay"] == 0.5


def test_the_optimizer_in_memory_gets_the_new_settings_on_resume(tmp_path):
    from workbench.train import OptimizerConfig

    first = _digits_trainer(tmp_path, optimizer=OptimizerConfig("adam", lr=0.003))
    first.fit()
    e = build_experiment("digits-mlp", epochs=2)
    config = e.config.replace(
        optimizer=OptimizerConfig("adam", lr=0.001, weight_decay=0.1, betas=(0.8, 0.99))
    )
    trainer = Trainer(e.model, e.loss_fn, e.splits, config, run="r", runs_dir=tmp_path)
    trainer.fit(resume=True)
    group = trainer.optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (0.001, 0.1, (0.8, 0.99))


def test_resuming_with_another_optimizer_kind_is_refused_before_training_naming_both(tmp_path):
    from workbench.train import OptimizerConfig

    _digits_trainer(tmp_path, optimizer=OptimizerConfig("adam")).fit()
    e = build_experiment("digits-mlp", epochs=2)
    config = e.config.replace(optimizer=OptimizerConfig("sgd", lr=0.1, momentum=0.9))
    trainer = Trainer(e.model, e.loss_fn, e.splits, config, run="r", runs_dir=tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(ValueError, match="trained with optimizer 'adam' and the config asks for 'sgd'"):
        trainer.fit(resume=True)
    assert all((a == b).all() for a, b in zip(before, trainer.model.parameters(), strict=True))


def _saved_run(tmp_path):
    trainer = _digits_trainer(tmp_path)
    trainer.fit()
    return tmp_path / "r" / "checkpoint.pt"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "is not a readable checkpoint"),
        (lambda p: p.write_bytes(b""), "is not a readable checkpoint"),
        (
            lambda p: p.write_bytes(__import__("random").Random(0).randbytes(4096)),
            "is not a readable checkpoint",
        ),
        (lambda p: __import__("torch").save([1, 2], p), "holds a list, not a workbench checkpoint"),
        (lambda p: __import__("torch").save({"w": 1}, p), "is not a workbench checkpoint: it has no model"),
    ],
    ids=["truncated", "empty", "random bytes", "a list", "a dict of something else"],
)
def test_a_damaged_checkpoint_is_named_with_what_is_wrong_and_nothing_is_overwritten(
    tmp_path, damage, message
):
    path = _saved_run(tmp_path)
    damage(path)
    before = path.read_bytes()
    log = (tmp_path / "r" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=message) as info:
        _digits_trainer(tmp_path, epochs=2).fit(resume=True)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before and (tmp_path / "r" / "metrics.jsonl").read_text() == log


def test_a_checkpoint_of_another_model_is_refused_with_the_keys_that_differ(tmp_path):
    _saved_run(tmp_path)
    e = build_experiment("digits-mlp", epochs=2)
    other = __import__("torch").nn.Sequential(
        __import__("torch").nn.Flatten(), __import__("torch").nn.Linear(64, 10)
    )
    trainer = Trainer(other, e.loss_fn, e.splits, e.config, run="r", runs_dir=tmp_path)
    with pytest.raises(ValueError, match=r"its weights do not fit this model \(.*(Missing|Unexpected) key"):
        trainer.fit(resume=True)


def test_resume_of_a_run_that_never_saved_is_refused_and_its_log_kept(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"event": "fit_start", "start_step": 0}\n')
    with pytest.raises(ValueError, match=r"nothing to resume in .* no checkpoint\.pt"):
        _digits_trainer(tmp_path).fit(resume=True)
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == '{"event": "fit_start", "start_step": 0}\n'
    (tmp_path / "r" / "checkpoint.pt").mkdir()
    with pytest.raises(ValueError, match=r"checkpoint\.pt is not a file"):
        _digits_trainer(tmp_path).fit(resume=True)
    assert _digits_trainer(tmp_path, run="fresh").fit(resume=True).status == "finished"  # never started: fine


def test_a_full_disk_is_said_and_the_previous_checkpoint_kept(tmp_path, monkeypatch):
    import shutil

    import torch

    from workbench.train.checkpoint import load_checkpoint, save_checkpoint

    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"step": 1, "w": torch.ones(3)}, path)

    def fills_the_disk(state, file):
        file.write(b"x" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 128 vs 100")

    monkeypatch.setattr(torch, "save", fills_the_disk)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, 0))
    with pytest.raises(
        OSError, match=r"no space left on the device holding .* the previous checkpoint is kept"
    ):
        save_checkpoint({"step": 2, "w": torch.ones(3)}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left


SAVER = """
import os, sys, torch
from workbench.train.checkpoint import save_checkpoint
torch.set_num_threads(1)  # no OpenMP pool before the forks below
state = {"step": 0, "w": torch.randn(1_000_000)}  # 4 MB: a save takes a few ms
for _ in sys.stdin:  # per line, a process that saves for ever (forked: torch is imported once)
    pid = os.fork()
    if pid == 0:
        while True:
            state["step"] += 1
            save_checkpoint(state, sys.argv[1])
    print(pid, flush=True)
    os.waitpid(pid, 0)  # until the test kills it
    print("reaped", flush=True)
"""


def test_killing_saves_twenty_times_leaves_a_loadable_checkpoint_and_no_stale_temp_files(tmp_path):
    from workbench.train.checkpoint import load_checkpoint, save_checkpoint

    path = tmp_path / "checkpoint.pt"
    rng = random.Random(0)
    forks = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        for _ in range(20):
            forks.stdin.write("save\n")
            forks.stdin.flush()
            saver = int(forks.stdout.readline())
            time.sleep(rng.uniform(0.05, 0.4))  # mid-save, most of the time
            os.kill(saver, signal.SIGKILL)
            assert forks.stdout.readline().strip() == "reaped"
            if path.exists():
                assert load_checkpoint(path)["step"] >= 1  # every checkpoint on disk loads
    finally:
        forks.kill()
        forks.wait()
    left = [p.name for p in tmp_path.iterdir() if p.name != "checkpoint.pt"]
    save_checkpoint({"step": 0}, path)  # the next save cleans up after the killed ones
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"], left


BAD_LINES = [b"garbage\n", b"[1, 2]\n", b"\xff\xfe not utf-8\n", b'{"event": "step", "step": 9, "lo\n']


def test_malformed_log_lines_are_skipped_counted_and_the_follower_keeps_following(tmp_path):
    from workbench.train import follow_metrics
    from workbench.train.events import Callback

    class Steps(Callback):
        def __init__(self):
            self.steps = []

        def on_step(self, metrics):
            self.steps.append(metrics["step"])

    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b'{"event": "fit_start", "start_step": 0}\n')
    seen = Steps()
    follower = follow_metrics(tmp_path, [seen], interval=0.02)
    with log.open("ab") as file:
        for step, bad in enumerate(BAD_LINES, start=1):
            file.write(bad)
            file.write(f'{{"event": "step", "step": {step}, "loss": 1.0}}\n'.encode())
            file.flush()
            time.sleep(0.05)
        file.write(b'{"event": "fit_end", "status": "finished"}\n')
    assert follower.wait(10), "the follower stopped following"
    follower.stop()
    assert seen.steps == [1, 2, 3, 4] and follower.skipped == 4
    with pytest.warns(UserWarning, match=r"skipped 4 malformed line\(s\) \(line 2, 4, 6, 8\)"):
        steps = read_metrics(tmp_path, kind="step")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]


def test_a_callback_that_raises_does_not_end_the_following(tmp_path):
    from workbench.train import MetricsLog, follow_metrics
    from workbench.train.events import Callback

    class Broken(Callback):
        def on_step(self, metrics):
            raise KeyError("loss")

    log = MetricsLog(tmp_path)
    log.on_fit_start({"start_step": 0})
    log.on_step({"step": 1})
    log.on_fit_end({"status": "finished"})
    follower = follow_metrics(tmp_path, [Broken()], interval=0.02)
    assert follower.wait(10)
    follower.stop()
    assert follower.errors == ["on_step: KeyError: 'loss'"]


def test_a_launch_on_a_run_name_in_use_is_refused_by_its_rank_0(tmp_path):
    from workbench.parallel import WorkerFailed, launch

    e = build_experiment("digits-mlp", epochs=1)

    def train(strategy):
        return Trainer(
            e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="r", runs_dir=tmp_path
        ).fit()

    holder = RunLock(tmp_path / "r")
    holder.acquire()
    try:
        with pytest.raises(
            WorkerFailed, match=r"rank 0 of 2 failed: RunInUseError: run directory .* is in use"
        ) as info:
            launch(train, 2, verbose=False)
        assert info.value.rank == 0
    finally:
        holder.release()


def test_any_random_bytes_are_refused_as_unreadable_never_a_raw_error(tmp_path):
    import random

    from workbench.train.checkpoint import load_checkpoint

    path = tmp_path / "checkpoint.pt"
    for seed in range(30):  # torch's reader fails in many ways on garbage (IndexError, KeyError, EOFError…)
        generator = random.Random(seed)
        path.write_bytes(generator.randbytes(generator.randint(1, 8192)))
        with pytest.raises(ValueError, match="is not a readable checkpoint"):
            load_checkpoint(path)


def _count_config_writes(strategy, runs_dir):
    from workbench.train.run_dir import RunDir

    writes = []
    original = RunDir.write_config

    def counted(self, config, *scheduler):
        writes.append(config)
        return original(self, config, *scheduler)

    RunDir.write_config = counted
    e = build_experiment("digits-mlp", epochs=1)
    Trainer(e.model, e.loss_fn, e.splits, e.config, strategy=strategy, run="ddp", runs_dir=runs_dir).fit()
    return strategy.gather_object(len(writes))


def test_only_rank_0_writes_the_run_files_of_a_ddp_run(tmp_path):
    """On a shared filesystem every rank's run directory is the same one: one writer."""
    from workbench.parallel import launch

    writes = launch(_count_config_writes, 2, args=(tmp_path,), verbose=False)
    assert writes == [1, 0]
    assert (tmp_path / "ddp" / "config.json").is_file()
