"""Which backend and GPU each process of a torchrun job gets: logic tests with the GPU count given (not GPU
runs). The two-agent torchrun test in test_torchrun.py checks the machine-local numbering for real."""

import pytest

from workbench.parallel.group.process_group import place


@pytest.mark.parametrize("gpus", [0, 1, 2])
@pytest.mark.parametrize("processes", [1, 2, 4])
def test_the_default_is_nccl_with_a_gpu_each_else_gloo_with_a_note_where_gpus_are_too_few(gpus, processes):
    here = list(range(10, 10 + processes))  # ranks 10.. of a larger job run on this machine
    placements = [place(None, gpus, here, rank) for rank in here]
    assert [p.local_rank for p in placements] == list(range(processes))
    assert {p.local_world_size for p in placements} == {processes}
    if processes <= gpus:
        assert {p.backend for p in placements} == {"nccl"} and placements[0].note is None
    else:
        assert {p.backend for p in placements} == {"gloo"}
        if gpus:
            assert placements[0].note == (
                f"{processes} processes of this job share {gpus} GPU(s) on this machine and nccl needs one "
                "each: they use gloo on CPU (start at most one process per GPU to train on the GPUs)"
            )
        else:
            assert placements[0].note is None  # a CPU machine: gloo is the only choice


@pytest.mark.parametrize("gpus", [0, 1, 2])
@pytest.mark.parametrize("processes", [1, 2, 4])
def test_nccl_asked_for_without_a_gpu_each_is_refused_and_gloo_is_always_granted(gpus, processes):
    here = list(range(processes))
    if processes <= gpus:
        assert place("nccl", gpus, here, processes - 1).local_rank == processes - 1
    else:
        with pytest.raises(
            ValueError, match=rf"needs a GPU for each of the {processes} processes .* sees {gpus}"
        ):
            place("nccl", gpus, here, 0)
    assert place("gloo", gpus, here, 0).backend == "gloo" and place("gloo", gpus, here, 0).note is None


def test_two_agents_on_one_machine_get_distinct_gpus():
    """torchrun --nnodes 2 on loopback: both agents say LOCAL_RANK=0; the job's ranks 0 and 1 share the
    machine, so they take GPUs 0 and 1."""
    assert [place(None, 2, [0, 1], rank).local_rank for rank in (0, 1)] == [0, 1]
    assert [place(None, 8, [1, 3], rank).local_rank for rank in (1, 3)] == [0, 1]  # ranks 0, 2 elsewhere
