"""The same training entry points under torchrun: one node with 2 processes, and 2 nodes on loopback."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench import models
from workbench.parallel.strategies.data_parallel import DataParallel
from workbench.train import Trainer

HERE = Path(__file__).parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def test_two_nodes_on_loopback_train_together_to_the_same_parameters(tmp_path, free_port, torchrun_case):
    port = free_port()
    command = [
        *TORCHRUN,
        "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "loopback-test",
        str(HERE / "torchrun_case.py"), str(tmp_path),
    ]  # fmt: skip
    nodes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    try:
        outputs = [node.communicate(timeout=240)[0].decode() for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    torchrun_case.assert_ranks_match_reference(tmp_path, world_size=2)
    # each agent numbered its process LOCAL_RANK=0; sharing this machine, they became 0 and 1 of 2 (so on a
    # GPU machine they would take GPUs 0 and 1, not both GPU 0)
    local = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert sorted(x["local_rank"] for x in local) == [0, 1]
    assert {x["local_world_size"] for x in local} == {"2"}


def test_one_node_with_two_processes(tmp_path, torchrun_case):
    command = [
        *TORCHRUN,
        "--standalone",
        "--nproc-per-node",
        "2",
        str(HERE / "torchrun_case.py"),
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    torchrun_case.assert_ranks_match_reference(tmp_path, world_size=2)


def test_workbench_train_runs_as_ranks_under_torchrun(tmp_path):
    command = [
        *TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "workbench", "train", "regression-linear",
        "--strategy", "ddp", "--n-samples", "4000", "--epochs", "2", "--run-name", "tr",
        "--runs-dir", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("split  metric") == 1  # rank 0 prints, rank 1 stays quiet
    assert "on 2 processes (gloo, cpu, 1 thread each)" in done.stdout
    assert (tmp_path / "tr" / "checkpoint.pt").is_file()


def test_from_env_outside_any_launcher_names_the_variables_and_the_commands(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(
        RuntimeError, match=r"torchrun's \(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT\)"
    ):
        DataParallel.from_env()


def test_data_parallel_without_a_process_group_says_how_to_get_one(regression_splits):
    strategy = DataParallel()  # options only: it joins a process group when bound
    with pytest.raises(RuntimeError, match=r"launch\(fn, nprocs=N\), or under torchrun"):
        Trainer(models.linear(10), torch.nn.functional.mse_loss, regression_splits, strategy=strategy)


@pytest.mark.parametrize("signalled", ["the agent", "rank 1 alone"])
def test_sigterm_stops_every_rank_at_the_same_logged_step_saved_and_resumable(tmp_path, signalled):
    """Slurm's time limit and scancel, and Kubernetes, end a torchrun job with SIGTERM (torchrun passes it to
    every rank, then SIGKILLs after 30 s); srun and mpirun signal each rank themselves. The ranks died at
    once, mid-epoch, with no end logged. Now they agree at the next logged step (the signal rides on the
    loss check's sum over ranks, so one rank's is enough), save there and end; --resume goes on from it."""

    from workbench.train import read_metrics

    command = [
        *TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "workbench", "train", "digits-mlp",
        "--strategy", "ddp", "--epochs", "500", "--run-name", "t", "--runs-dir", str(tmp_path),
    ]  # fmt: skip
    returncode, _, err = _sigterm_while_training(command, tmp_path / "t", signalled)
    end = read_metrics(tmp_path / "t", kind="fit_end")[-1]
    assert (end["status"], end["checkpoint"]) == ("stopped", str(tmp_path / "t" / "checkpoint.pt")), err
    how = "SIGTERM" if signalled == "the agent" else "another rank's signal"
    said = f"workbench train: stopped at step {end['step']} ({how}); checkpoint {end['checkpoint']}: "
    assert returncode != 0 and said + "continue with --resume" in err, err
    steps = [event["step"] for event in read_metrics(tmp_path / "t", kind="step")]
    assert steps[-1] == end["step"]  # a logged step: both ranks stopped after it (else the save would hang)
    if signalled == "the agent":  # the command `workbench runs` prints, under torchrun: 4 steps more
        listed = subprocess.run(
            [sys.executable, "-m", "workbench", "runs", "--runs-dir", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        footer = listed.stdout.splitlines()[-1]
        printed = f"workbench train --run-name t --runs-dir {tmp_path} --resume"
        assert footer == f"  t: {printed} (each rank's command under torchrun, as before)", listed.stdout
        more = ["--max-steps", str(end["step"] + 4)]
        torchrun = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", *shlex.split(printed), *more]
        resumed = subprocess.run(torchrun, capture_output=True, text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        assert read_metrics(tmp_path / "t", kind="fit_start")[-1]["start_step"] == end["step"]


YOUR_SCRIPT = """
import sys
from workbench.parallel import DataParallel
from workbench.presets import build_experiment
from workbench.train import Trainer

strategy = DataParallel.from_env()
more = {"max_steps": int(sys.argv[2])} if len(sys.argv) > 2 else {}  # a resume: a few steps more
experiment = build_experiment("digits-mlp", epochs=500, **more)
trainer = Trainer(experiment.model, experiment.loss_fn, experiment.splits, experiment.config,
                  strategy=strategy, run="yours", runs_dir=sys.argv[1])
try:
    result = trainer.fit(resume=True)
finally:
    strategy.close()
print(f"rank {strategy.rank}: {result.status} at step {result.step}")
"""


@pytest.mark.parametrize("signalled", ["the agent", "rank 1 alone"])
def test_your_script_under_torchrun_stops_every_rank_on_sigterm_saved_and_exits_143(tmp_path, signalled):
    """A script of yours with `DataParallel.from_env()` under torchrun (or srun, mpirun) at a time limit:
    every rank died at once with the last epoch's checkpoint. Now the ranks agree at the next logged step,
    save, rank 0 says so in one line and each script ends with 143, as `workbench train` does; the same
    command goes on from that step."""
    import re

    from workbench.train import read_metrics

    (tmp_path / "yours.py").write_text(YOUR_SCRIPT)
    command = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(tmp_path / "yours.py"), str(tmp_path)]
    _, out, err = _sigterm_while_training(command, tmp_path / "yours", signalled)
    end = read_metrics(tmp_path / "yours", kind="fit_end")[-1]
    checkpoint = str(tmp_path / "yours" / "checkpoint.pt")
    assert (end["status"], end["checkpoint"]) == ("stopped", checkpoint), err
    assert read_metrics(tmp_path / "yours", kind="step")[-1]["step"] == end["step"]  # a logged step
    how = "SIGTERM" if signalled == "the agent" else "another rank's signal"
    said = f"workbench: stopped training (2 processes) at step {end['step']} of 6000 after {how}; "
    assert err.count(said + f"checkpoint {checkpoint}") == 1, err  # rank 0's line
    assert f'{tmp_path / "yours.py"}", line' not in err, err  # no rank's traceback (torchrun has its own)
    assert "rank 0:" not in out and "rank 1:" not in out  # each script ended at fit, not after it
    if (
        signalled == "rank 1 alone"
    ):  # torchrun, not signalled, names the first rank to end (it ends the other)
        assert re.search(r"Root Cause[^=]*exitcode\s*: 143 ", err), err
        return
    resumed = subprocess.run([*command, str(end["step"] + 4)], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert read_metrics(tmp_path / "yours", kind="fit_start")[-1]["start_step"] == end["step"]
    assert f"rank 0: finished at step {end['step'] + 4}" in resumed.stdout


def _sigterm_while_training(command: list[str], run: Path, signalled: str) -> tuple[int, str, str]:
    """Start the torchrun `command`; once `run` has logged 2 steps, SIGTERM "the agent" (as Slurm and
    Kubernetes do: torchrun passes it to every rank) or "rank 1 alone". Its exit status, stdout, stderr."""
    import signal
    import time

    import psutil

    agent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, deadline = run / "metrics.jsonl", time.monotonic() + 120
    while not (log.is_file() and log.read_text().count('"event": "step"') >= 2):
        assert agent.poll() is None and time.monotonic() < deadline, agent.communicate()
        time.sleep(0.1)
    if signalled == "the agent":
        agent.send_signal(signal.SIGTERM)
    else:
        ranks = {p.environ().get("RANK"): p for p in psutil.Process(agent.pid).children(recursive=True)}
        ranks["1"].send_signal(signal.SIGTERM)
    out, err = agent.communicate(timeout=120)
    return agent.returncode, out, err
