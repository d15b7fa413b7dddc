"""launch(): DDP workers forked from this process; equivalence, results, live events, faults, bad input."""

import os
import signal
import socket
import tempfile
import time

import psutil
import pytest
import torch

from workbench import models
from workbench.data import ShardedLoader, load_dataset, split_dataset
from workbench.parallel import Launch, WorkerFailed, launch
from workbench.train import Callback, OptimizerConfig, TrainConfig, TrainControl, Trainer

SAMPLES = 240  # divisible by 2×8 and 3×8, so every rank's batches have the same size


def _splits():
    return split_dataset(load_dataset("regression", n_samples=SAMPLES), (1.0, 0.0, 0.0), seed=0)


def _model():
    torch.manual_seed(0)
    return models.mlp(10, 1, hidden=(16,))


def _config(**changes):
    base = dict(epochs=1, batch_size=8, optimizer=OptimizerConfig("adam", lr=1e-2), log_every=1, seed=3)
    return TrainConfig(**{**base, **changes})


def _reference(nprocs: int, config: TrainConfig) -> torch.nn.Module:
    """Single process, one step per concatenation of the ranks' batches of that step."""
    model, train = _model(), _splits().train
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optimizer.lr)
    loaders = []
    for rank in range(nprocs):
        loader = ShardedLoader(train, config.batch_size, rank=rank, world_size=nprocs, seed=config.seed)
        loader.set_epoch(0)
        loaders.append(loader)
    for batches in zip(*loaders, strict=True):
        x = torch.cat([x for x, _ in batches])
        y = torch.cat([y for _, y in batches])
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


def _train(strategy, config):
    trainer = Trainer(_model(), torch.nn.functional.mse_loss, _splits(), config, strategy=strategy)
    return {"step": trainer.fit().step, "rank": strategy.rank, "world": strategy.world_size}


def _pids_gone(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _port_free(port):
    """Nothing listens on it: a server (like the next rendezvous store) can bind it again."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


@pytest.mark.parametrize("nprocs", [2, 3])
def test_ddp_equals_single_process_on_the_concatenated_batch(nprocs):
    config = _config()
    trained = _model()
    result = launch(_train, nprocs, args=(config,), model=trained, threads_per_process=1, verbose=False)
    assert result == {"step": SAMPLES // (8 * nprocs), "rank": 0, "world": nprocs}
    reference = _reference(nprocs, config)
    pairs = zip(trained.parameters(), reference.parameters(), strict=True)
    differences = [(a - b).abs().max().item() for a, b in pairs]
    assert max(differences) <= 1e-5, differences
    assert (
        max(differences) < (_model().state_dict()["1.weight"] - trained.state_dict()["1.weight"]).abs().max()
    )


def test_events_stream_per_rank_while_training_and_world_size_is_reported():
    class Recorder(Callback):
        def __init__(self):
            self.starts, self.steps, self.ends = [], [], []

        def on_fit_start(self, info):
            self.starts.append(info)

        def on_step(self, metrics):
            self.steps.append((time.monotonic(), metrics))

        def on_fit_end(self, summary):
            self.ends.append((time.monotonic(), summary))

    recorder = Recorder()
    launch(_train, 2, args=(_config(epochs=2),), callbacks=[recorder], verbose=False)
    (info,) = recorder.starts
    assert info["world_size"] == 2 and info["launch"].startswith("2 processes (gloo, CPU")
    assert "2 processes (gloo, cpu" in info["strategy"]
    ranks = {m["rank"] for _, m in recorder.steps}
    assert ranks == {0, 1}
    for _, metrics in recorder.steps:
        assert {"loss", "rank_loss", "samples_per_s", "lr", "step_time"} <= metrics.keys()
    # where each rank's time went: DDP's all-reduce, exposed (comm) or hidden behind backward (overlapped)
    for rank in (0, 1):
        times = [m["step_time"] for _, m in recorder.steps if m["rank"] == rank]
        assert all(t["comm"] + t["comm_overlapped"] > 0 for t in times), times
    # rank 0's and rank 1's logged steps agree on the all-ranks mean loss
    by_step = {}
    for _, m in recorder.steps:
        by_step.setdefault(m["step"], []).append(m["loss"])
    assert all(len(v) == 2 and v[0] == pytest.approx(v[1]) for v in by_step.values())
    # events arrived during training, not all at the end
    (end_time, summary), first_step = recorder.ends[0], recorder.steps[0][0]
    assert summary["status"] == "finished" and first_step < end_time


def test_launch_prints_world_size_and_devices(capsys):
    launch(lambda strategy: None, 2)
    assert "launch: 2 processes (gloo, CPU, 1 thread each) on 127.0.0.1:" in capsys.readouterr().out


def test_a_blocking_launch_shows_rank_0s_progress_unless_quiet(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the trainers' run directories
    config = _config(epochs=2)
    steps = launch(_train, 2, args=(config,))["step"]
    shown = capsys.readouterr()
    out = shown.out.split("\n", 1)[1]  # after the "launch: 2 processes ..." line
    assert f"{steps}/{steps}" in out and "loss=" in out  # the bar reached the end, with the loss
    assert f"finished at step {steps}" in out and shown.err == ""  # stdout: a notebook paints stderr red
    # capsys is no terminal: the bar's last line (no \r redraws in a log), the evaluations in it, the status
    assert out.count("\n") == 2 and "\r" not in out, out
    launch(_train, 2, args=(config,), verbose=False)
    assert capsys.readouterr() == ("", "")
    launch(_train, 2, args=(config,), verbose=False, progress=True)
    assert f"finished at step {steps}" in capsys.readouterr().out


def test_control_stop_reaches_every_rank_at_the_same_step(tmp_path):
    control = TrainControl()

    class StopAtFive(Callback):
        def on_step(self, metrics):
            if metrics["step"] >= 5:
                control.stop()

    def train(strategy):
        config = _config(epochs=50, log_every=1)
        trainer = Trainer(
            _model(), torch.nn.functional.mse_loss, _splits(), config, strategy=strategy, run="stop",
            runs_dir=tmp_path,
        )  # fmt: skip
        result = trainer.fit()
        return [(r.status, r.step) for r in strategy.gather_object(result)]

    statuses = launch(train, 2, callbacks=[StopAtFive()], control=control, verbose=False)
    assert statuses[0] == statuses[1] and statuses[0][0] == "stopped" and 5 <= statuses[0][1] < 50
    assert (tmp_path / "stop" / "checkpoint.pt").is_file()


def test_workers_train_with_the_config_given_to_launch_and_another_one_is_refused_naming_it():
    launched = _config(epochs=2, optimizer=OptimizerConfig("sgd", lr=0.05))

    def train(strategy, config):  # config None: the Trainer takes Launch's, the one the dashboard shows
        trainer = Trainer(_model(), torch.nn.functional.mse_loss, _splits(), config, strategy=strategy)
        return trainer.fit().step, trainer.config.optimizer.lr

    steps, lr = launch(train, 2, args=(None,), config=launched, verbose=False)
    assert (steps, lr) == (2 * SAMPLES // (2 * 8), 0.05)
    with pytest.raises(WorkerFailed, match=r"not the one given to Launch.*optimizer: .*0\.01.* here"):
        launch(train, 2, args=(_config(),), config=launched, verbose=False)


def test_a_rank_that_raises_is_named_everyone_stops_and_launch_works_again(free_port):
    port = free_port()

    def fail_on_rank_1(strategy):
        if strategy.rank == 1:
            raise ValueError("bad shard on purpose")
        torch.distributed.barrier()  # rank 0 waits for rank 1 forever; the launcher must end it

    job = Launch(fail_on_rank_1, 2, port=port, verbose=False)
    started = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"rank 1 of 2 failed: ValueError: bad shard on purpose") as info:
        job.fit()
    assert time.monotonic() - started < 30
    assert info.value.rank == 1 and "Traceback" in str(info.value)
    # the user's frame in the user's file (cloudpickle sent it as "<dynamic-code>"), none of the worker's
    trace = str(info.value).split("rank 1 traceback:\n", 1)[1]
    assert f'File "{__file__}", line' in trace and 'raise ValueError("bad shard on purpose")' in trace, trace
    assert "_worker.py" not in trace and "<dynamic-code>" not in trace, trace
    assert _pids_gone(job.pids) and _port_free(port)
    assert job.fit.__self__ is job and Launch(lambda s: s.world_size, 2, port=port, verbose=False).fit() == 2


def test_a_return_value_that_cannot_be_sent_back_is_named_with_what_can():
    with pytest.raises(
        WorkerFailed, match=r"rank 0's function returned a generator, which cannot be sent"
    ) as info:
        launch(lambda strategy: (step for step in range(3)), 2, verbose=False)
    assert "return tensors, numbers, strings, or lists and dicts of them" in str(info.value)
    assert "Traceback" not in str(info.value) and "torch.save" not in str(info.value)


def test_a_rank_killed_with_sigkill_is_named_within_30_seconds():
    def train(strategy):
        class KillRank1(Callback):
            def on_step(self, metrics):
                if strategy.rank == 1 and metrics["step"] == 3:
                    os.kill(os.getpid(), signal.SIGKILL)

        trainer = Trainer(
            _model(), torch.nn.functional.mse_loss, _splits(), _config(epochs=100), strategy=strategy,
            callbacks=[KillRank1()],
        )  # fmt: skip
        trainer.fit()

    job = Launch(train, 2, verbose=False)
    started = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"rank 1 of 2 failed: killed by SIGKILL") as info:
        job.fit()
    assert time.monotonic() - started < 30
    assert info.value.rank == 1
    assert _pids_gone(job.pids)
    assert launch(lambda s: s.rank, 2, verbose=False) == 0


def test_a_rank_that_leaves_with_os_exit_0_is_named_not_the_rank_it_left_waiting():
    """Issue 44: rank 1 calling os._exit(0) got rank 0 blamed (its collective's peer had closed).
    (sys.exit(0) raises SystemExit, which the worker reports as it is.)"""

    def train(strategy):
        import os

        if strategy.rank == 1:
            os._exit(0)
        time.sleep(0.5)
        value = torch.ones(1)
        torch.distributed.all_reduce(value)
        return float(value)

    job = Launch(train, 2, verbose=False, timeout_s=20)
    with pytest.raises(
        WorkerFailed, match=r"^rank 1 of 2 failed: exited with code 0 before its function returned"
    ) as info:
        job.fit()
    assert info.value.rank == 1
    assert _pids_gone(job.pids)


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_launcher_killed_from_outside_leaves_no_worker_and_no_shared_memory(tmp_path, signal_name):
    import glob
    import subprocess
    import sys

    script = f"""
import os, time, torch
from workbench.parallel import launch

def train(strategy, data, folder):
    open(os.path.join(folder, f"rank{{strategy.rank}}.pid"), "w").write(str(os.getpid()))
    time.sleep(120)  # never returns on its own within the test

launch(train, 2, args=(torch.zeros(512, 1024), {str(tmp_path)!r}), verbose=False)  # 2 MiB: shared
"""
    launcher = subprocess.Popen([sys.executable, "-c", script])

    def written_pids() -> list[int]:  # a file may exist before its worker's write lands in it
        return [int(text) for path in tmp_path.glob("rank*.pid") if (text := path.read_text().strip())]

    deadline = time.monotonic() + 60
    while len(written_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = written_pids()
    folders = glob.glob(f"/dev/shm/workbench-shared-{launcher.pid}-*") + glob.glob(
        f"{tempfile.gettempdir()}/workbench-shared-{launcher.pid}-*"
    )
    assert len(pids) == 2 and folders, "the workers did not start"
    launcher.send_signal(getattr(signal, signal_name))
    launcher.wait(10)
    assert _pids_gone(pids, timeout=5.0), f"workers still running after the launcher's {signal_name}"
    assert not any(os.path.exists(folder) for folder in folders)


def test_interrupting_the_kernel_stops_every_worker_within_10_seconds():
    class InterruptAtStep2(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 2 and metrics["rank"] == 0:
                os.kill(os.getpid(), signal.SIGINT)  # what Jupyter's "interrupt kernel" sends

    job = Launch(_train, 2, args=(_config(epochs=1000),), callbacks=[InterruptAtStep2()], verbose=False)
    with pytest.raises(KeyboardInterrupt):
        job.fit()
    interrupted = time.monotonic()
    assert _pids_gone(job.pids, timeout=10)
    assert time.monotonic() - interrupted < 10


def test_the_trained_weights_need_a_wrapped_model():
    with pytest.raises(RuntimeError, match="model= was given but rank 0 trained no model"):
        launch(lambda strategy: None, 1, model=_model(), verbose=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nprocs": 0}, "nprocs must be an integer ≥ 1, got 0"),
        ({"nprocs": "2"}, "nprocs must be an integer ≥ 1"),
        ({"backend": "mpi"}, "backend='mpi' is not supported; allowed values: 'gloo', 'nccl'"),
        ({"threads_per_process": 0}, "threads_per_process must be an integer ≥ 1"),
        ({"timeout_s": 0}, "timeout_s must be a finite number > 0"),
        ({"port": 70000}, "port must be ≤ 65535"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"nprocs": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        Launch(lambda s: None, **arguments)


def test_a_port_in_use_is_refused_before_starting():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is in use"):
            Launch(lambda s: None, 2, port=port)


def test_fn_must_be_callable_and_resume_is_up_to_fn():
    with pytest.raises(ValueError, match="fn must be a function"):
        Launch("train.py", 2)
    with pytest.raises(ValueError, match="resuming is up to your function"):
        Launch(lambda s: None, 2).fit(resume=True)


def test_nccl_refuses_more_processes_than_gpus():
    gpus = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"nprocs={gpus + 1} but torch sees {gpus} GPU"):
        Launch(lambda s: None, gpus + 1, backend="nccl")


def test_initialised_cuda_does_not_stop_the_default_start_and_fork_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as after .cuda() in the notebook
    assert launch(lambda s: s.world_size, 2, verbose=False) == 2  # fork-server workers start clean
    with pytest.raises(RuntimeError, match=r"CUDA is already initialised.*start_method='forkserver'"):
        launch(lambda s: None, 2, verbose=False, start_method="fork")


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_every_start_method_runs_a_function_defined_here_with_a_class_defined_here(method):
    class Greeting:
        def __init__(self, word):
            self.word = word

    def greet(strategy, greeting):
        return f"{greeting.word} from {strategy.rank} of {strategy.world_size}"

    assert launch(greet, 2, args=(Greeting("hi"),), verbose=False, start_method=method) == "hi from 0 of 2"


def test_a_notebook_that_ran_torch_on_two_threads_launches_workers_on_two_threads():
    """The reproducer of issue 21: a fork after the parent's OpenMP pool exists hangs its children at their
    first parallel region; the fork server's children do not. Run with a deadline in a fresh interpreter
    (a plain script: no `if __name__ == "__main__"` guard, as a user would write it)."""
    import subprocess
    import sys

    script = """
import torch
from workbench.parallel import launch
torch.set_num_threads(2)
a = torch.randn(1000, 1000)
[a @ a for _ in range(5)]
def fn(strategy):
    x = torch.randn(1000, 1000)
    [x @ x for _ in range(5)]
    return torch.get_num_threads()
print(launch(fn, 2, threads_per_process=2, timeout_s=60, verbose=False))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["2"]


def test_a_notebook_function_using_dist_beside_a_global_named_config_launches():
    """cloudpickle sends the submodules a function's names reach (``dist`` + ``config`` →
    ``torch.distributed.config``, a torch config module it could not pickle): found writing notebook 04."""
    import subprocess
    import sys

    script = """
import torch.distributed as dist
from workbench.parallel import launch
from workbench.train import TrainConfig
config = TrainConfig(batch_size=8)
def fn(strategy):
    return dist.get_world_size() * config.batch_size
print(launch(fn, 2, timeout_s=60, verbose=False))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["16"]


def test_workers_stand_where_the_launcher_stands_now(tmp_path, monkeypatch):
    """cwd, environment and sys.path at launch time, not when the fork server started."""
    launch(lambda s: None, 2, verbose=False)  # the server is running from here on
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORKBENCH_TEST_MARK", "here")

    def where(strategy):
        import os

        return os.getcwd(), os.environ.get("WORKBENCH_TEST_MARK")

    assert launch(where, 2, verbose=False) == (str(tmp_path), "here")


@pytest.mark.parametrize("gpus", [0, 1, 2])
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_the_default_backend_is_nccl_only_with_a_gpu_per_process(monkeypatch, gpus, nprocs):
    """Logic test with torch's device count patched (no GPU runs here): nccl needs one GPU per process."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    job = Launch(lambda s: None, nprocs, verbose=False)
    assert job.backend == ("nccl" if 0 < nprocs <= gpus else "gloo")
    described = job.describe()
    if job.backend == "gloo" and gpus:
        assert f"{gpus} GPU(s) for {nprocs} processes, nccl needs one each" in described
    if nprocs > gpus:
        with pytest.raises(ValueError, match=f"nprocs={nprocs} but torch sees {gpus} GPU"):
            Launch(lambda s: None, nprocs, backend="nccl")


def test_a_hung_rank_is_named_with_its_stack_within_the_timeout_and_nothing_is_left():
    def sleeps_on_rank_1(strategy):
        if strategy.rank == 1:
            time.sleep(3600)  # hangs outside any collective: the rank that waits for it must not be blamed
        torch.distributed.barrier()

    job = Launch(sleeps_on_rank_1, 2, timeout_s=5, verbose=False)
    started = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"rank 1 of 2 hung: it was still running when rank 0 \(") as info:
        job.fit()
    assert time.monotonic() - started < 5 + 15
    assert info.value.rank == 1
    assert "sleeps_on_rank_1" in str(info.value) and "rank 1 was here" in str(info.value)
    assert _pids_gone(job.pids)


def test_a_rank_that_hangs_in_a_function_without_collectives_is_named_within_the_timeout():
    """The launch ends every run with a collective (rank 0 gathers the result), so the ranks that finished
    wait there for the hung one, give up after timeout_s, and the hung one is named: the job always ends."""

    def sleeps_on_rank_1_without_collectives(strategy):
        if strategy.rank == 1:
            time.sleep(3600)  # no collective call of its own
        return strategy.rank

    job = Launch(sleeps_on_rank_1_without_collectives, 2, timeout_s=4, verbose=False)
    started = time.monotonic()
    with pytest.raises(
        WorkerFailed, match=r"rank 1 of 2 hung: it was still running when rank 0 .* timeout_s=4"
    ) as info:
        job.fit()
    assert time.monotonic() - started < 4 + 15
    assert info.value.rank == 1
    assert "sleeps_on_rank_1_without_collectives" in str(info.value)  # its stack
    assert _pids_gone(job.pids)


def test_a_profile_request_traces_the_same_steps_on_every_rank(tmp_path):
    control = TrainControl()
    reported = []

    class ProfileAtThree(Callback):
        def on_step(self, metrics):
            if metrics["step"] == 3 and metrics["rank"] == 0:
                control.profile(2)
            if "profile" in metrics:
                reported.append((metrics["rank"], metrics["profile"]["steps"]))

    def train(strategy):
        config = _config(epochs=3, log_every=1)
        trainer = Trainer(
            _model(), torch.nn.functional.mse_loss, _splits(), config, strategy=strategy, run="profiled",
            runs_dir=tmp_path,
        )  # fmt: skip
        trainer.fit()
        return strategy.gather_object(trainer.profile.steps)

    steps = launch(train, 2, callbacks=[ProfileAtThree()], control=control, verbose=False)
    assert steps[0] == steps[1] and steps[0][1] == steps[0][0] + 1 and steps[0][0] > 3
    assert sorted(rank for rank, _ in reported) == [0, 1]  # each rank's step event says so
    for rank in (0, 1):
        assert (tmp_path / "profiled" / "profile" / f"rank{rank}.json").is_file()


def _resume_when_rank_0_has_logged(strategy, runs_dir):
    trainer = Trainer(
        _model(), torch.nn.functional.mse_loss, _splits(), _config(), strategy=strategy, run="race",
        runs_dir=runs_dir,
    )  # fmt: skip
    if strategy.rank != 0:  # a slower rank: without an agreed answer it saw rank 0's fresh metrics log
        deadline = time.monotonic() + 3.0
        while not (runs_dir / "race" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return trainer.fit(resume=True).step


def test_every_rank_takes_rank_0s_resume_decision_so_a_slow_rank_does_not_refuse_a_fresh_run(tmp_path):
    """A new run started with resume=True (as an elastic torchrun job's command is): rank 0 starts the metrics
    log at once, so a rank that looked later used to refuse "a run that logged but never saved"."""
    steps = launch(_resume_when_rank_0_has_logged, 2, args=(tmp_path,), verbose=False)
    assert steps == SAMPLES // (2 * 8)
