"""Slurm for real: a one-node cluster on 127.0.0.1 (Debian's slurm-wlm and munge; `make test` installs them)
started and stopped by a fixture, running `srun -n 2` and the sbatch script of docs/scaling-out.md."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.train import read_metrics

HERE = Path(__file__).parent
SCALING_OUT = HERE.parent.parent / "docs" / "scaling-out.md"
DAEMONS = ("slurmctld", "slurmd", "munged")


def _missing_slurm() -> str | None:
    absent = [
        tool
        for tool in (*DAEMONS, "srun", "sbatch", "sinfo", "scontrol", "munge")
        if shutil.which(tool) is None
    ]
    if absent:
        return f"no {', '.join(absent)} (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "starting munge and Slurm's daemons needs root"
    return None


def _munge_works() -> bool:
    encoded = subprocess.run(["munge", "-n"], capture_output=True)
    return encoded.returncode == 0 and subprocess.run(["unmunge"], input=encoded.stdout).returncode == 0


@pytest.fixture(scope="module")
def slurm(tmp_path_factory, free_port):
    """A one-node Slurm cluster: munged (when none runs), slurmctld and slurmd; yields the environment to
    run srun/sbatch in, and stops what it started (no process left behind)."""
    missing = _missing_slurm()
    if missing:
        if os.environ.get("WORKBENCH_REQUIRE_SLURM"):
            pytest.fail(f"Slurm is required here (make test installs it): {missing}")
        pytest.skip(missing)
    folder = tmp_path_factory.mktemp("slurm")
    started_munge = False
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
        started_munge = True
    host = socket.gethostname()
    conf = folder / "slurm.conf"
    conf.write_text(
        f"""ClusterName=workbench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env |= {"SLURM_CONF": str(conf), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    daemons = [
        subprocess.Popen(
            [name, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        for name in ("slurmctld", "slurmd")
    ]
    try:
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if state.stdout.strip() == "idle":
                break
            assert time.monotonic() < deadline, f"Slurm did not come up: {state.stdout} {state.stderr}"
            assert all(d.poll() is None for d in daemons), (folder / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)
        yield env
    finally:
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if started_munge:
            pid = Path("/run/munge/munged.pid")
            if pid.exists():
                os.kill(int(pid.read_text()), signal.SIGTERM)


def test_srun_with_two_tasks_trains_to_the_parameters_of_one_process(slurm, tmp_path, torchrun_case):
    done = subprocess.run(
        ["srun", "-n", "2", sys.executable, str(HERE / "torchrun_case.py"), str(tmp_path)],
        env=slurm,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    torchrun_case.assert_ranks_match_reference(tmp_path, world_size=2)


def test_the_readme_sbatch_script_runs_as_written(slurm, tmp_path):
    job = _submit_page_script(r"#SBATCH --ntasks=2\n.*?", "one-rank-per-task", tmp_path, slurm)
    state = _wait_for_job(job, slurm)  # (sbatch --wait polls at growing intervals: ~40 s for this job)
    output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert state == ("COMPLETED", "0:0"), output
    run = tmp_path / "runs" / f"digits-{job}"
    assert {e["world_size"] for e in read_metrics(run, kind="fit_start")} == {2}
    assert read_metrics(run, kind="fit_end")[-1]["status"] == "finished"
    assert "finished:" in output and "Traceback" not in output


def _submit_page_script(pattern: str, which: str, folder: Path, env: dict[str, str]) -> str:
    """Submit docs/scaling-out.md's sbatch script whose lines after ``#!/bin/bash`` match `pattern`, as
    written, from `folder` (output in job.out); its job id."""
    found = re.search(f"```bash\n(#!/bin/bash\n{pattern})```", SCALING_OUT.read_text(), re.DOTALL)
    assert found, f"docs/scaling-out.md's {which} sbatch script"
    (folder / "job.sh").write_text(found.group(1))
    submitted = subprocess.run(
        ["sbatch", "--output", "job.out", "job.sh"], cwd=folder, env=env, capture_output=True, text=True
    )
    assert submitted.returncode == 0, submitted.stderr
    return re.search(r"Submitted batch job (\d+)", submitted.stdout).group(1)


def _wait_for_job(job: str, env: dict[str, str], timeout_s: float = 300) -> tuple[str, str]:
    """(JobState, ExitCode) of a batch job once it has ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        shown = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        state = re.search(r"JobState=(\S+)", shown)
        if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state.group(1), re.search(r"ExitCode=(\S+)", shown).group(1)
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)


def test_a_job_past_its_time_limit_stops_saved_requeues_itself_and_resumes(slurm, tmp_path):
    """docs/scaling-out.md's time-limit script, as written: the signal Slurm sends before the limit
    (`--signal=TERM@120`; `scancel --signal=TERM` sends the same to the ranks now) stops both ranks at one
    step, saved; the script requeues the job, and its second start goes on from that step to the end."""
    job = _submit_page_script(r"(?:#SBATCH [^\n]*\n)*#SBATCH --signal=.*?", "time-limit", tmp_path, slurm)
    run = tmp_path / "runs" / f"digits-{job}"
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").exists() or len(read_metrics(run, kind="step")) < 5:
        assert time.monotonic() < deadline, _job_output(tmp_path)
        time.sleep(0.2)
    signalled = subprocess.run(["scancel", "--signal=TERM", job], env=slurm, capture_output=True, text=True)
    assert signalled.returncode == 0, signalled.stderr
    _start_when_requeued(job, slurm)
    state = _wait_for_job(job, slurm)
    output = _job_output(tmp_path)
    assert state == ("COMPLETED", "0:0"), output
    ends = read_metrics(run, kind="fit_end")
    starts = read_metrics(run, kind="fit_start")
    assert [e["status"] for e in ends] == ["stopped", "finished"], output
    stopped_at = ends[0]["step"]
    assert 0 < stopped_at < ends[1]["step"] and starts[1]["start_step"] == stopped_at, output
    assert {e["world_size"] for e in starts} == {2}
    threads = {int(re.search(r"(\d+) threads? each", e["strategy"]).group(1)) for e in starts}
    assert max(threads) * 2 <= (os.cpu_count() or 1), starts[0]["strategy"]  # the ranks share the cores
    assert f"stopped at step {stopped_at} (SIGTERM)" in output
    assert f"resumed from the checkpoint at step {stopped_at}" in output and "Traceback" not in output
    shown = subprocess.run(["scontrol", "show", "job", job], env=slurm, capture_output=True, text=True).stdout
    assert "Restarts=1" in shown, shown


def _start_when_requeued(job: str, env: dict[str, str], timeout_s: float = 120) -> None:
    """Once the job is back in the queue (its script requeued it), let it start: Slurm holds a requeued
    job ~2 minutes (its BeginTime), which a cluster's queue hides and a test would wait out. Not in the
    second its credential was revoked: slurmd refuses a credential of that second ("Job credential
    revoked", the job FAILED 1:0 in 1 of 4 runs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        shown = subprocess.run(
            ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
        ).stdout
        if "JobState=PENDING" in shown and "Restarts=1" in shown:
            time.sleep(2)
            now = ["scontrol", "update", f"JobId={job}", "StartTime=now"]
            subprocess.run(now, env=env, check=True, capture_output=True)
            return
        assert "JobState=COMPLETED" not in shown and time.monotonic() < deadline, shown
        time.sleep(0.2)


def _job_output(folder: Path) -> str:
    return (folder / "job.out").read_text() if (folder / "job.out").exists() else ""
