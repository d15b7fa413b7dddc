"""Notebook 07's exercise: a process's place in the job (rank, world size, local rank), read from whichever
launcher started it, in that launcher's own variables.

A learner's function ``place(env)`` gets the process's environment (a dict) and returns ``(rank, world_size,
local_rank)``. `check_launcher_place` runs it on the environments real launchers give one process of a job of
8 (torchrun, Open MPI's mpirun, MPICH/Intel MPI's mpiexec, Slurm's srun, torchrun started by srun), against
what `workbench.parallel.detect_launch_env` reads there, and names the usual slips.

Example:
    >>> def place(env):
    ...     for rank, size, local in [
    ...         ("RANK", "WORLD_SIZE", "LOCAL_RANK"),  # torchrun first: it may run inside srun or mpirun
    ...         ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ...         ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ...         ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
    ...     ]:
    ...         if rank in env:
    ...             return int(env[rank]), int(env[size]), int(env[local])
    >>> check_launcher_place(place)
    'place reads all 5 launchers right: torchrun, Open MPI, MPICH, Slurm, torchrun inside srun'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from workbench.exercises.mismatch import ExerciseMismatch, learners_code
from workbench.exercises.waiting import waits_for_learner
from workbench.parallel.group.launch_env import detect_launch_env

_HINT = (
    "each launcher names rank, world size and local rank its own way (the table above); look for torchrun's "
    "RANK first, as torchrun may itself run inside srun or mpirun"
)


class LauncherCase(NamedTuple):
    """One process of a job of 8 (2 machines × 4), as one launcher describes it."""

    name: str
    how: str  # how the job was started
    env: dict[str, str]


def launcher_cases() -> list[LauncherCase]:
    """The environment each launcher gives the process on the second machine whose local rank is 2.

    Example:
        >>> [case.name for case in launcher_cases()]
        ['torchrun', 'Open MPI', 'MPICH', 'Slurm', 'torchrun inside srun']
        >>> mpi = launcher_cases()[1]
        >>> mpi.how, mpi.env["OMPI_COMM_WORLD_RANK"], mpi.env["OMPI_COMM_WORLD_LOCAL_RANK"]
        ('mpirun -np 8 --host node0:4,node1:4 -x MASTER_ADDR=node0', '6', '2')
    """
    torchrun = {
        "RANK": "6",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "2",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "job7",
    }
    return [
        LauncherCase("torchrun", "torchrun --nnodes 2 --nproc-per-node 4 on each machine", torchrun),
        LauncherCase(
            "Open MPI",
            "mpirun -np 8 --host node0:4,node1:4 -x MASTER_ADDR=node0",
            {
                "OMPI_COMM_WORLD_RANK": "6",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "2",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                "OMPI_COMM_WORLD_NODE_RANK": "1",
                "MASTER_ADDR": "node0",
                "OMPI_MCA_ess_base_jobid": "913768449",
            },
        ),
        LauncherCase(
            "MPICH",
            "mpiexec -n 8 -ppn 4 -hosts node0,node1 -genv MASTER_ADDR node0",
            {
                "PMI_RANK": "6",
                "PMI_SIZE": "8",
                "MPI_LOCALRANKID": "2",
                "MPI_LOCALNRANKS": "4",
                "MASTER_ADDR": "node0",
                "PMI_KVSNAME": "kvs_4242_0",
            },
        ),
        LauncherCase(
            "Slurm",
            "srun -N 2 --ntasks-per-node 4 (in an sbatch script)",
            {
                "SLURM_PROCID": "6",
                "SLURM_STEP_NUM_TASKS": "8",
                "SLURM_LOCALID": "2",
                "SLURM_NODEID": "1",
                "SLURM_STEP_NODELIST": "node[0-1]",
                "SLURM_JOB_ID": "81234",
                "SLURM_NTASKS": "8",
            },
        ),
        LauncherCase(
            "torchrun inside srun",
            "srun -N 2 --ntasks-per-node 1 torchrun --nproc-per-node 4 ... (one agent per machine)",
            {
                "SLURM_PROCID": "1",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "1",
                "SLURM_STEP_NODELIST": "node[0-1]",
                "SLURM_JOB_ID": "81235",
                "SLURM_NTASKS": "2",
                **torchrun,
            },
        ),
    ]


@waits_for_learner
def check_launcher_place(place: Callable[[Mapping[str, str]], Any]) -> str:
    """Run ``place(env)`` on every launcher's environment; raise `ExerciseMismatch` at the first wrong one."""
    name = getattr(place, "__name__", "place")
    cases = launcher_cases()
    for case in cases:
        found = detect_launch_env(case.env)
        want = (found.rank, found.world_size, found.local_rank)
        given = f" on {case.name}'s variables ({case.how}): {_listing(case.env)}"
        with learners_code(name, _HINT, given):
            got = place(dict(case.env))
        if not isinstance(got, tuple | list) or len(got) != 3:
            raise ExerciseMismatch(
                f"{name} returned {got!r} on {case.name}; return three whole numbers, (rank, world_size, "
                f"local_rank), e.g. {want}"
            )
        if tuple(got) != want:
            raise ExerciseMismatch(
                f"{name} says (rank, world size, local rank) = {tuple(got)} on {case.name} ({case.how}); the "
                f"process is {want}{_diagnose(tuple(got), want, case)}. Its variables: {_listing(case.env)}. "
                f"Hint: {_HINT}"
            )
    return f"{name} reads all {len(cases)} launchers right: {', '.join(case.name for case in cases)}"


def _diagnose(got: tuple, want: tuple, case: LauncherCase) -> str:
    """Name the slip when `got` is one of the usual wrong answers."""
    env = case.env
    if "RANK" in env and "SLURM_PROCID" in env:
        slurm = (int(env["SLURM_PROCID"]), int(env["SLURM_STEP_NUM_TASKS"]), int(env["SLURM_LOCALID"]))
        if got == slurm:
            return (
                ": that is the place of srun's task, the torchrun agent, not of this worker. torchrun's "
                "variables describe the worker, so read them before Slurm's"
            )
    if any(isinstance(value, str) for value in got):
        return ": the values are strings; convert them with int()"
    if got[0] == want[2] and got[0] != want[0]:
        return ": the rank given is the local rank (the place on this machine); the rank counts the whole job"
    if got[1] == 4 and want[1] == 8:
        return ": the world size given is this machine's process count (the local size); the world is the job"
    return ""


def _listing(env: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in env.items())
