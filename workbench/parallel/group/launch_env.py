"""Which launcher started this process, and torch.distributed's variables from its own.

torchrun (and Spark's TorchDistributor, and `launch`) set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT. Other launchers say the same in their own words; `detect_launch_env` reads them:

=================  ==========================  =========================  ==========================
launcher           rank, world size            local rank, local size     rendezvous (when not given)
=================  ==========================  =========================  ==========================
Open MPI mpirun    OMPI_COMM_WORLD_RANK/SIZE   OMPI_COMM_WORLD_LOCAL_*    one machine: 127.0.0.1
MPICH, Intel MPI   PMI_RANK, PMI_SIZE          MPI_LOCALRANKID/NRANKS     one machine: 127.0.0.1
Slurm srun         SLURM_PROCID,               SLURM_LOCALID              first host of
                   SLURM_STEP_NUM_TASKS                                   SLURM_STEP_NODELIST
=================  ==========================  =========================  ==========================

The port, when MASTER_PORT is not given, comes from the job's id (the same on every rank, different for
concurrent jobs): 20000 + id mod 20000. MPI jobs spanning machines need MASTER_ADDR (rank 0's host), given
with ``mpirun -x MASTER_ADDR=host``; the error says so.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in a job, as its launcher described it.

    Example (srun's variables for task 3 of 4, said as torchrun's for torch.distributed's ``env://``):
        >>> slurm = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1",
        ...          "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242"}
        >>> detect_launch_env(slurm).variables()  # doctest: +NORMALIZE_WHITESPACE
        {'RANK': '3', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'gpu07',
         'MASTER_PORT': '24242'}
    """

    launcher: str  # "torchrun", "Open MPI", "MPICH", "Slurm"
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    def variables(self) -> dict[str, str]:
        """The torchrun variables that say the same (what torch.distributed's ``env://`` reads)."""
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def detect_launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The launcher of this process (torchrun first), or None when no launcher's variables are set.

    Raises ValueError when a launcher is recognised but its variables cannot place the process (naming
    the variable and the fix).

    Example (the variables Open MPI's ``mpirun -np 2`` gives its second process on one machine):
        >>> ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
        ...         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        ...         "OMPI_MCA_ess_base_jobid": "913768449"}
        >>> found = detect_launch_env(ompi)
        >>> found.launcher, found.rank, found.world_size, found.master_addr, found.master_port
        ('Open MPI', 1, 2, '127.0.0.1', 28449)
    """
    env = os.environ if environ is None else environ
    if all(name in env for name in TORCHRUN_VARIABLES):
        return LaunchEnv(
            "torchrun",
            _int(env, "RANK"),
            _int(env, "WORLD_SIZE"),
            _int(env, "LOCAL_RANK"),
            env["MASTER_ADDR"],
            _int(env, "MASTER_PORT"),
        )
    if "OMPI_COMM_WORLD_RANK" in env:
        return _mpi(env, "Open MPI", "OMPI_COMM_WORLD_", ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE"),
                    job=("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"))  # fmt: skip
    if "PMI_RANK" in env:
        return _mpi(env, "MPICH", "", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                    job=("PMI_KVSNAME", "PMI_JOBID", "PMIX_NAMESPACE"))  # fmt: skip
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:  # inside srun (not the batch script)
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodes and "MASTER_ADDR" not in env:
            raise ValueError(
                "under Slurm, SLURM_STEP_NODELIST is not set, so rank 0's host is unknown; set MASTER_ADDR "
                "(export MASTER_ADDR=$(scontrol show hostnames | head -n 1)) before srun"
            )
        return LaunchEnv(
            "Slurm",
            _int(env, "SLURM_PROCID"),
            _int(env, "SLURM_STEP_NUM_TASKS"),
            _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            env.get("MASTER_ADDR") or first_host(nodes or ""),
            _port(env, ("SLURM_JOB_ID",)),
        )
    return None


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list.

    Example:
        >>> first_host("gpu[007-010,12],cpu1"), first_host("node3,node4"), first_host("a-[2-3]-x")
        ('gpu007', 'node3', 'a-2-x')
    """
    first = re.match(r"[^,\[]*(\[[^\]]*\])?[^,]*", nodelist.strip()).group(0)  # commas in [] do not split
    bracket = re.search(r"\[([^\]]*)\]", first)
    if bracket is None:
        return first
    start = re.split(r"[,-]", bracket.group(1))[0]
    return first[: bracket.start()] + start + first[bracket.end() :]


def _mpi(env: Mapping[str, str], launcher: str, prefix: str, names: tuple[str, ...], job: tuple[str, ...]):
    rank, size, local_rank, local_size = (_int(env, prefix + name) for name in names)
    if "MASTER_ADDR" in env:
        addr = env["MASTER_ADDR"]
    elif local_size == size:
        addr = "127.0.0.1"  # every process on this machine
    else:
        raise ValueError(
            f"under {launcher}, this job spans machines ({size} processes, {local_size} on this one) and "
            "MASTER_ADDR is not set: pass rank 0's host and a free port to every process, e.g. "
            "mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500 ..."
        )
    return LaunchEnv(launcher, rank, size, local_rank, addr, _port(env, job))


def _port(env: Mapping[str, str], job_variables: tuple[str, ...]) -> int:
    if "MASTER_PORT" in env:
        return _int(env, "MASTER_PORT")
    job = next((env[name] for name in job_variables if env.get(name)), None)
    if job is None:
        raise ValueError(
            f"MASTER_PORT is not set and none of {', '.join(job_variables)} names the job to derive one "
            "from; set MASTER_PORT to a free port, the same for every process"
        )
    number = int(job) if job.isdigit() else zlib.crc32(job.encode())
    return 20000 + number % 20000


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    if not value.strip().isdigit():
        raise ValueError(f"{name} must be a whole number ≥ 0, got {value!r} (set by your launcher?)")
    return int(value)
