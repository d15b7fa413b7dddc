"""Notebook 07's "read your place from the launcher" check: the right answer passes, each slip is named."""

import pytest

from workbench.exercises import ExerciseMismatch, check_launcher_place, launcher_cases
from workbench.parallel.group.launch_env import detect_launch_env

LAUNCHERS = [
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
]


def reading(order, convert=int):
    def place(env):
        for rank, size, local in order:
            if rank in env:
                return convert(env[rank]), convert(env[size]), convert(env[local])

    return place


def test_the_reference_answer_passes():
    assert check_launcher_place(reading(LAUNCHERS)) == (
        "place reads all 5 launchers right: torchrun, Open MPI, MPICH, Slurm, torchrun inside srun"
    )


def test_every_case_is_a_process_of_the_same_job_as_workbench_reads_it():
    places = {
        (found.rank, found.world_size, found.local_rank, found.launcher)
        for found in (detect_launch_env(case.env) for case in launcher_cases())
    }
    assert places == {(6, 8, 2, "torchrun"), (6, 8, 2, "Open MPI"), (6, 8, 2, "MPICH"), (6, 8, 2, "Slurm")}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (reading(LAUNCHERS[1:] + LAUNCHERS[:1]), r"\(1, 2, 0\) on torchrun inside srun.*srun's task"),
        (reading(LAUNCHERS, convert=str), r"on torchrun \(.*the values are strings"),
        (
            reading([("LOCAL_RANK", "WORLD_SIZE", "LOCAL_RANK"), *LAUNCHERS[1:]]),
            r"the rank given is the local",
        ),
        (
            reading(
                [
                    *LAUNCHERS[:1],
                    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                ]
            ),
            r"on Open MPI .*local size",
        ),
        (reading(LAUNCHERS[:3]), r"returned None on Slurm; return three whole numbers"),
        (lambda env: (int(env["RANK"]), 8, 2), r"<lambda> raised KeyError: 'RANK' on Open MPI's variables"),
    ],
)
def test_each_slip_is_named(answer, message):
    with pytest.raises(ExerciseMismatch, match=message):
        check_launcher_place(answer)
