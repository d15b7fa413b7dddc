"""Interactive ranks: `RankPool` and the ``%ranks`` / ``%%ranks`` magics, driven as a notebook drives them."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from workbench.parallel.launching.rank_pool import PoolError, RankPool


@pytest.fixture(scope="module")
def pool():
    with RankPool(2, threads_per_process=1) as started:
        yield started


def _gone(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_cell_runs_on_every_rank_and_each_ranks_output_comes_back_apart(pool):
    run = pool.run("t = torch.tensor([rank + 1.0])\ndist.all_reduce(t)\nprint(rank, t.item())\nt * 10")
    assert [run.text(rank) for rank in (0, 1)] == ["0 3.0\n", "1 3.0\n"]
    assert [run.cells[r].items[-1] for r in (0, 1)] == [("display", {"text/plain": "tensor([30.])"})] * 2
    assert not run.failed
    # the namespace persists between cells, one per rank
    assert pool.run("print(t.item() + rank)").text(1) == "4.0\n"


def test_a_cell_on_some_ranks_and_stderr_apart(pool):
    run = pool.run("import sys\nprint('warn', file=sys.stderr)", ranks=[1])
    assert list(run.cells) == [1]
    assert run.text(1, "stderr") == "warn\n"
    with pytest.raises(ValueError, match=r"ranks must be among 0\.\.1 of this pool of 2, got \[5\]"):
        pool.run("1", ranks=[0, 5])


def test_a_rank_that_raises_shows_its_traceback_in_the_cells_code_only_and_the_pool_goes_on(pool):
    run = pool.run(
        "def check(r):\n    if r == 1:\n        raise ValueError(f'bad rank {r}')\ncheck(rank)\nprint('ok')"
    )
    assert run.failed == [1]
    assert run.text(0) == "ok\n"
    failure = run.cells[1].failure
    assert failure.line() == "ValueError: bad rank 1"
    assert "rank_server" not in failure.traceback and "_worker" not in failure.traceback
    assert "line 4, in <module>" in failure.traceback and "line 3, in check" in failure.traceback
    assert "raise ValueError(f'bad rank {r}')" in failure.traceback  # the cell's source lines are shown
    assert pool.run("print('still here')").text(1) == "still here\n"


def test_values_move_between_the_notebook_and_the_ranks(pool):
    def scale(x, by):  # a function defined here travels by value
        return x * by

    pool.push("scale", scale)
    pool.push("base", torch.arange(3.0))
    pool.run("w = scale(base, rank + 1)")
    assert [w.tolist() for w in pool.pull("w")] == [[0.0, 1.0, 2.0], [0.0, 2.0, 4.0]]
    assert pool.pull("w", rank=1).tolist() == [0.0, 2.0, 4.0]
    pool.push("only_one", 7, ranks=[1])
    with pytest.raises(PoolError, match=r"rank 0 has no variable 'only_one'; it has: .*base"):
        pool.pull("only_one", rank=0)
    with pytest.raises(PoolError, match=r"rank 0 has no variable 'only_one'"):
        pool.pull("only_one")  # rank 1's answer is read too: nothing is left to answer the next request
    assert pool.pull("only_one", rank=1) == 7
    assert pool.pull("w")[1].tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="identifier"):
        pool.push("not a name", 1)


def test_interrupting_the_notebook_interrupts_the_cell_on_every_rank_and_keeps_the_pool(pool):
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    began = time.monotonic()
    run = pool.run("import time\nfor _ in range(600):\n    time.sleep(0.05)")
    assert time.monotonic() - began < 5
    assert run.interrupted and not run.stuck
    assert {run.cells[r].failure.error for r in (0, 1)} == {"KeyboardInterrupt"}
    assert pool.run("print(rank)").text(0) == "0\n"


def test_a_rank_stuck_in_a_collective_is_named_with_its_stack_then_the_pool_restarts(pool):
    began = time.monotonic()
    run = pool.run("if rank == 0:\n    dist.all_reduce(torch.ones(1))", timeout_s=1)
    assert time.monotonic() - began < 6
    assert run.timed_out_after == 1 and run.stuck == [0]
    assert run.cells[1].done and not run.cells[0].done
    assert "in all_reduce" in run.cells[0].stacks and "<rank cell" in run.cells[0].stacks
    with pytest.raises(PoolError, match=r"the pool is stuck: rank\(s\) 0 did not end.*restart it"):
        pool.run("1")
    old = [p.pid for p in pool.processes]
    pool.restart()
    assert _gone(old)
    assert pool.run("print(world_size)").text(1) == "2\n"


def test_a_rank_that_exits_is_named_and_the_pool_asks_for_a_restart(pool):
    run = pool.run("import os\nif rank == 1:\n    os._exit(3)\nprint('ok')")
    assert run.cells[1].failure.error == "RankLost"
    assert "exit code 3" in run.cells[1].failure.message
    with pytest.raises(PoolError, match="restart"):
        pool.pull("t")
    pool.restart()


def test_a_trainer_runs_on_the_pool_and_its_model_can_be_inspected_and_trained_on(pool):
    code = """
from workbench import models
from workbench.data import load_dataset, split_dataset
from workbench.train import OptimizerConfig, TrainConfig, Trainer
torch.manual_seed(0)
model = models.mlp(10, 1, hidden=(16,))
splits = split_dataset(load_dataset("regression", n_samples=240), (1.0, 0.0, 0.0), seed=0)
config = TrainConfig(epochs=1, batch_size=8, optimizer=OptimizerConfig("adam", lr=1e-2), seed=3)
result = Trainer(model, torch.nn.functional.mse_loss, splits, config, strategy=strategy).fit()
print(result.step)
"""
    steps = []
    pool.add_callback(type("Steps", (), {"on_step": lambda self, event: steps.append(event["step"])})())
    run = pool.run(code)
    assert not run.failed, run.cells
    assert run.text(0) == run.text(1) == "15\n"  # 240 samples / (2 ranks × 8)
    weights = pool.pull("model")
    assert all(torch.equal(a, b) for a, b in zip(*(w.state_dict().values() for w in weights), strict=True))
    assert max(steps) == 15  # the ranks' trainer events reached this process
    run = pool.run(
        "result = Trainer(model, torch.nn.functional.mse_loss, splits, config, strategy=strategy).fit()"
    )
    assert not run.failed, run.cells


def test_stop_leaves_no_process_and_no_file():
    pool = RankPool(2, threads_per_process=1).start()
    pids, folder = [p.pid for p in pool.processes], Path(pool._folder.name)
    pool.stop()
    assert _gone(pids) and not folder.exists()
    with pytest.raises(PoolError, match=r"no ranks are running; start them first \(%ranks start N"):
        pool.run("1")


@pytest.mark.parametrize("ending", ["exit", "SIGKILL"])
def test_a_kernel_that_exits_or_is_killed_leaves_no_rank_behind(ending):
    script = (
        "import sys, time\n"
        "from workbench.parallel.launching.rank_pool import RankPool\n"
        "pool = RankPool(2, threads_per_process=1).start()\n"
        "print(' '.join(str(p.pid) for p in pool.processes), flush=True)\n"
        "if sys.argv[1] == 'SIGKILL':\n"
        "    time.sleep(60)\n"
    )
    kernel = subprocess.Popen(
        [sys.executable, "-c", script, ending], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent
    )
    pids = [int(pid) for pid in kernel.stdout.readline().split()]
    assert len(pids) == 2
    if ending == "SIGKILL":
        kernel.kill()
    kernel.wait(timeout=30)
    assert _gone(pids, timeout=10)


def test_rich_values_are_shown_as_jupyter_would_show_them(pool):
    run = pool.run(
        "class Bold:\n"
        "    def _repr_html_(self):\n"
        "        return '<b>rank ' + str(rank) + '</b>'\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "figure, axes = plt.subplots()\n"
        "axes.plot([0, rank])\n"
        "display(figure)\n"
        "Bold()"
    )
    assert not run.failed, run.cells
    shown = [item for kind, item in run.cells[1].items if kind == "display"]
    assert shown[0]["image/png"].startswith(b"\x89PNG")
    assert shown[1]["text/html"] == "<b>rank 1</b>"


def test_each_stack_dump_reads_only_what_the_worker_appended(tmp_path):
    """A worker keeps its stack file open and writes at its own offset: a second dump (a second --timeout in
    one pool) is read from where the first ended, not from a truncated file padded with NUL bytes."""
    from workbench.parallel.launching._worker import STACK_SIGNAL, python_stacks, stack_file

    worker = subprocess.Popen(
        [sys.executable, "-c",
         "import faulthandler, sys, time; f = open(sys.argv[1], 'w'); "
         f"faulthandler.register({int(STACK_SIGNAL)}, file=f, all_threads=True); "
         "print(flush=True); time.sleep(60)",
         str(stack_file(tmp_path, 0))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        worker.stdout.readline()
        first = python_stacks({0: worker.pid}, tmp_path, 0.3)[0]
        second = python_stacks({0: worker.pid}, tmp_path, 0.3)[0]
    finally:
        worker.kill()
        worker.wait()
    assert first.startswith("Current thread") and "in <module>" in first
    assert second == first and "\x00" not in second
