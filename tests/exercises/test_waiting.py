"""Exercises that wait: every check says "not attempted yet" for a stub (no failure, Run All goes on), and the
``%%answer`` / ``%%when_written`` cells, through an IPython shell as a notebook runs them."""

import pytest
from IPython.core.interactiveshell import InteractiveShell

from workbench.exercises import (
    check_axis_sum,
    check_block_sum,
    check_blocks_per_sm,
    check_conv1d,
    check_dot,
    check_launcher_place,
    check_lr_schedule,
    check_map,
    check_optimizer_step,
    check_outer_add,
    check_pool,
    check_prefix_sum,
    check_recall_metric,
    check_scale_update,
    check_tensor_parallel_mlp,
    check_tiled_matmul,
    check_weight_average,
    check_zip,
    your_turn,
)
from workbench.exercises.cells import CellFailed, UsageError
from workbench.exercises.pipeline_schedule import check_schedules
from workbench.exercises.ring_all_reduce import check_ring_all_reduce
from workbench.exercises.slow_step import check_slowest_phase
from workbench.exercises.state_bytes import check_state_bytes
from workbench.exercises.waiting import is_stub
from workbench.exercises.zero_bytes import check_zero_bytes
from workbench.kernels._numba import load_cuda

cuda = load_cuda()


def stub(*args, **kwargs):
    your_turn()


@cuda.jit
def kernel_stub(x, out):
    your_turn()


CHECKS = [
    (check_map, (kernel_stub,)),
    (check_outer_add, (kernel_stub,)),
    (check_block_sum, (kernel_stub,)),
    (check_tiled_matmul, (kernel_stub,)),
    *[(check, (kernel_stub,)) for check in (check_zip, check_pool, check_dot, check_conv1d)],
    *[(check, (kernel_stub,)) for check in (check_prefix_sum, check_axis_sum)],
    (check_blocks_per_sm, (stub,)),
    (check_optimizer_step, (stub, "adam")),
    (check_lr_schedule, (stub,)),
    (check_weight_average, (stub,)),
    (check_ring_all_reduce, (stub,)),  # on ranks in notebook 03; a stub is answered before any collective
    (check_zero_bytes, (stub,)),
    (check_schedules, (stub, stub)),
    (check_tensor_parallel_mlp, (stub,)),
    (check_scale_update, (stub,)),
    (check_state_bytes, (stub,)),
    (check_launcher_place, (stub,)),
    (check_recall_metric, (type("Recall", (), {"sums": stub, "compute": stub})(), 2)),
]


@pytest.mark.parametrize(("check", "arguments"), CHECKS, ids=[check.__name__ for check, _ in CHECKS])
def test_every_check_says_not_attempted_for_a_stub(check, arguments):
    said = check(*arguments)
    assert said.startswith("not attempted yet: ") and "your_turn()" in said, said


def test_a_function_that_calls_a_stub_is_not_attempted_and_names_the_stub():
    def warmup_cosine(step, total_steps, warmup_steps):
        your_turn()

    def warmup_from_zero(step, total_steps, warmup_steps):  # a learner's variant built on the stub
        return step / warmup_steps if step < warmup_steps else warmup_cosine(step, total_steps, warmup_steps)

    assert not is_stub(warmup_from_zero)
    said = check_lr_schedule(warmup_from_zero)
    assert said.startswith("not attempted yet: warmup_cosine still calls your_turn()"), said
    assert check_slowest_phase(..., None, {}).startswith("not attempted yet: set slowest to one of data")


@pytest.fixture
def shell(monkeypatch):
    monkeypatch.delenv("WORKBENCH_ANSWERS", raising=False)  # a learner's kernel (the suite sets it for nbval)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    yield shell
    InteractiveShell.clear_instance()


STUB = "from workbench.exercises import your_turn\n\ndef add_ten(x):\n    your_turn()"
ANSWER = "%%answer\ndef add_ten(x):\n    return x + 10"


def test_run_all_leaves_the_answer_unrun_and_the_cells_that_use_yours_wait(shell, capsys, monkeypatch):
    assert shell.run_cell(STUB).success
    result = shell.run_cell(ANSWER)
    assert result.success and "One answer, not run" in capsys.readouterr().out
    assert is_stub(shell.user_ns["add_ten"])  # the learner's own stub is still there
    result = shell.run_cell("%%when_written add_ten\nprint('ran', add_ten(1))")
    out = capsys.readouterr().out
    assert (
        result.success
        and out == "waiting for your add_ten (the exercise above): this cell runs once it is done\n"
    )
    assert shell.run_cell("def add_ten(x):\n    return x + 10").success  # the learner writes it
    result = shell.run_cell("%%when_written add_ten\nprint('ran', add_ten(1))")
    assert result.success and capsys.readouterr().out == "ran 11\n"


def test_answers_run_with_run_or_in_ci(shell, capsys, monkeypatch):
    shell.run_cell(STUB)
    assert shell.run_cell(ANSWER.replace("%%answer", "%%answer --run")).success
    assert shell.user_ns["add_ten"](1) == 11
    shell.run_cell(STUB)
    monkeypatch.setenv("WORKBENCH_ANSWERS", "1")  # what the suite's nbval run sets
    assert shell.run_cell(ANSWER).success and shell.user_ns["add_ten"](1) == 11
    assert capsys.readouterr().out == ""


def test_mistakes_in_the_cells_are_one_line(shell, capsys, monkeypatch):
    result = shell.run_cell("%%answer --show\npass")
    assert isinstance(result.error_in_exec, UsageError)
    assert "%%answer takes no arguments but --run, got '--show'" in str(result.error_in_exec)
    result = shell.run_cell("%%when_written nothing_here\npass")
    assert isinstance(result.error_in_exec, UsageError) and "nothing_here not defined yet" in str(
        result.error_in_exec
    )
    monkeypatch.setenv("WORKBENCH_ANSWERS", "1")
    result = shell.run_cell("%%answer\nraise ValueError('a broken answer')")
    assert isinstance(result.error_in_exec, CellFailed)  # CI fails on a reference answer that raises
    out = capsys.readouterr().out
    assert "a broken answer" in out and out.endswith("%%answer: the cell raised (above)\n")
