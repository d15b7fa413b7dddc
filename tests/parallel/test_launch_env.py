"""Which launcher started a process, read from its variables: torchrun, Open MPI, MPICH/Intel MPI, Slurm srun.
Open MPI's are what Debian's mpirun 4.1 sets (test_mpirun.py runs it for real); MPICH's and Slurm's follow
their documentation (no MPICH or Slurm cluster here)."""

import pytest

from workbench.parallel.group.launch_env import detect_launch_env, first_host

OPEN_MPI = {
    "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "913768449", "PMIX_NAMESPACE": "913768449",
}  # fmt: skip
MPICH = {
    "PMI_RANK": "1",
    "PMI_SIZE": "2",
    "MPI_LOCALRANKID": "1",
    "MPI_LOCALNRANKS": "2",
    "PMI_KVSNAME": "kvs_77_0",
}
SRUN = {
    "SLURM_JOB_ID": "123456", "SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "8", "SLURM_STEP_NODELIST": "gpu[007-010]", "SLURM_JOB_NODELIST": "gpu[007-010]",
}  # fmt: skip


def test_nothing_set_is_no_launcher():
    assert detect_launch_env({}) is None
    batch_script = {k: v for k, v in SRUN.items() if k != "SLURM_STEP_NUM_TASKS"}  # sbatch's own shell
    assert detect_launch_env(batch_script) is None


def test_torchrun_variables_win_over_the_launcher_that_started_torchrun():
    torchrun = {
        "RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "n0",
        "MASTER_PORT": "29500",
    }
    found = detect_launch_env({**SRUN, **torchrun})  # `srun torchrun ...`: torchrun's processes
    assert (found.launcher, found.rank, found.world_size, found.master_addr) == ("torchrun", 1, 8, "n0")


def test_open_mpi_on_several_machines_needs_master_addr_and_then_uses_it():
    with pytest.raises(
        ValueError, match=r"spans machines \(4 processes, 2 on this one\) .* mpirun -x MASTER_ADDR"
    ):
        detect_launch_env(OPEN_MPI)
    found = detect_launch_env({**OPEN_MPI, "MASTER_ADDR": "node0"})
    assert found.variables() == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "28449",
    }  # fmt: skip


def test_mpich_on_one_machine_rendezvous_on_loopback_with_a_port_from_its_job():
    found = detect_launch_env(MPICH)
    assert (found.launcher, found.rank, found.world_size, found.master_addr) == ("MPICH", 1, 2, "127.0.0.1")
    assert 20000 <= found.master_port < 40000
    assert detect_launch_env({**MPICH, "MASTER_PORT": "29400"}).master_port == 29400


def test_slurm_srun_takes_the_first_host_of_the_step_and_a_port_from_the_job_id():
    found = detect_launch_env(SRUN)
    assert (found.launcher, found.rank, found.world_size, found.local_rank) == ("Slurm", 5, 8, 1)
    assert (found.master_addr, found.master_port) == ("gpu007", 20000 + 123456 % 20000)


@pytest.mark.parametrize(
    ("nodes", "first"),
    [
        ("n1", "n1"),
        ("n1,n2", "n1"),
        ("gpu[07-10,12]", "gpu07"),
        ("a[3,5],b[1-2]", "a3"),
        ("x-[9-11]-y,z", "x-9-y"),
    ],
)
def test_the_first_host_of_a_slurm_node_list(nodes, first):
    assert first_host(nodes) == first


def test_unreadable_variables_are_named():
    with pytest.raises(ValueError, match=r"OMPI_COMM_WORLD_SIZE must be a whole number ≥ 0, got 'two'"):
        detect_launch_env({**OPEN_MPI, "OMPI_COMM_WORLD_SIZE": "two"})
    no_job = {k: v for k, v in MPICH.items() if k != "PMI_KVSNAME"}
    with pytest.raises(ValueError, match="MASTER_PORT is not set and none of PMI_KVSNAME, PMI_JOBID"):
        detect_launch_env(no_job)
