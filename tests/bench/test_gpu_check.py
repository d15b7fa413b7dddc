"""`workbench gpu-check` on a CPU: its plan, its pytest steps, its report, and its one-line refusal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.bench import gpu_check
from workbench.bench.gpu_check import Step, plan, run_check
from workbench.bench.gpu_report import Check, at_least, at_most, reported


def test_the_plan_takes_steps_in_order_while_the_budget_lasts(tmp_path):
    steps = [
        Step("a", 100, list),
        Step("b", 300, list),
        Step("c", 50, list),
        Step("tests", 1, list, needs="x"),
    ]
    chosen, left_out = plan(200, steps, repo=tmp_path)
    assert [step.name for step in chosen] == ["a", "c"]
    assert left_out == [
        ("b", "planned at 300 s, over the 200 s budget"),
        ("tests", "needs x of a workbench checkout; run from one"),
    ]


def test_the_default_plan_fits_the_issue_s_six_minutes_or_says_what_it_leaves_out():
    chosen, left_out = plan(gpu_check.DEFAULT_BUDGET_S)
    assert sum(step.seconds for step in chosen) <= 360
    assert {step.name for step in chosen} | {name for name, _ in left_out} == {
        step.name for step in gpu_check.default_steps()
    }
    assert chosen[0].name == "doctor" and "gpu tests" in {step.name for step in chosen}


def test_the_plan_command_prints_every_step_and_runs_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "gpu-check", "--plan", "--budget", "100"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for step in gpu_check.default_steps():
        assert step.name in done.stdout
    assert "over the 100 s budget" in done.stdout


@pytest.mark.skipif(gpu_check.no_gpu_reason() is None, reason="this machine has a CUDA GPU")
def test_without_a_gpu_the_check_says_so_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "gpu-check", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no CUDA GPU here" in done.stderr
    assert "needs one NVIDIA GPU" in done.stderr and not list(tmp_path.iterdir())


def test_a_run_writes_its_report_after_every_step_and_a_broken_step_is_a_failed_check(tmp_path):
    def broken():
        raise RuntimeError("no cuBLAS handle")

    steps = [
        Step("fine", 1, lambda: [at_least("matmul", 0.8, "× torch", "torch.mm", 0.75)]),
        Step("broken", 1, broken),
        Step("slow", 1, lambda: [at_most("trainer", 1.05, "× hand loop", "hand loop", 1.02)]),
    ]
    written = []
    report = run_check(
        10, steps, echo=lambda line: None, on_step=lambda so_far: written.append(len(so_far.checks))
    )
    assert written == [1, 2, 3]
    assert [check.verdict for check in report.checks] == ["pass", "FAIL", "FAIL"]
    assert "RuntimeError: no cuBLAS handle" in report.checks[1].detail
    markdown, data = report.write(tmp_path)
    saved = json.loads(data.read_text())
    assert [check["name"] for check in saved["checks"]] == ["matmul", "broken", "trainer"]
    assert set(saved["environment"]) >= {
        "gpu",
        "driver",
        "cuda (torch)",
        "torch",
        "numba",
        "numba-cuda",
        "python",
    }
    assert "| matmul | 0.8 | × torch | torch.mm | >= 0.75 | pass |" in markdown.read_text()


def test_a_reported_value_has_no_verdict():
    check = reported("copy bandwidth", 3000.0, "GB/s")
    assert check.passed is None and check.verdict == "—"
    assert Check("x", None, "", "", "runs", False, "why").cells()[1] == "—"


TESTS = """
import time
def test_passes(): pass
def test_fails(): assert 1 == 2, "one is not two"
def test_skips():
    import pytest; pytest.skip("no reason")
"""


def test_a_pytest_step_counts_outcomes_and_names_each_failure(tmp_path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    summary, failure = gpu_check._pytest_checks("sample", [str(tmp_path / "test_sample.py")], timeout=120)
    assert (summary.value, summary.passed, summary.detail) == (1, False, "1 passed, 1 failed, 1 skipped")
    assert failure.name == "sample: test_fails" and "one is not two" in failure.detail


def test_a_notebook_cell_s_failure_says_what_differed_and_what_it_printed_on_stderr(tmp_path):
    """nbval alone reports output on stderr as "Unexpected output fields: {'stderr'}" and a cell's changed
    text as its first line, and under pytest its kernel drops what reaches fd 2 (a learner's shows it); the
    GPU report's line names the cell, the lines that differ and what was printed."""
    import nbformat

    cells = [
        ("import warnings\nwarnings.warn('Profiler clears events')\nprint('a')", "a\n"),
        ("print('fp16: True')\nprint('fp32: True')", "fp32: True\n"),
        ("print('same')", "same\n"),
        # C code and child processes write to the kernel's fd 2: a learner's kernel shows it, nbval's too
        ("import subprocess\nsubprocess.run('echo USDT: profiler_start >&2', shell=True)\nprint('b')", "b\n"),
    ]
    notebook = nbformat.v4.new_notebook()
    for number, (source, stored) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\n" + source, execution_count=number)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
        notebook.cells.append(cell)
    nbformat.write(notebook, tmp_path / "cells.ipynb")
    args = [*gpu_check.NBVAL_ARGS, str(tmp_path / "cells.ipynb")]
    summary, warned, changed, from_fd = gpu_check._pytest_checks("notebooks", args, timeout=120)
    assert summary.detail == "1 passed, 3 failed, 0 skipped"
    assert warned.name == "notebooks: Cell 0"
    assert "{'stderr'}" in warned.detail and "stderr: UserWarning: Profiler clears events" in warned.detail
    assert changed.detail.endswith("mismatch 'stdout' (this run: fp16: True; stored: -)")
    assert from_fd.name == "notebooks: Cell 3" and from_fd.detail.endswith("stderr: USDT: profiler_start")


def test_a_pytest_step_past_its_time_is_stopped_with_its_workers(tmp_path):
    (tmp_path / "test_slow.py").write_text(
        "import subprocess, sys, time\n"
        "def test_sleeps():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    time.sleep(60)\n"
    )
    (check,) = gpu_check._pytest_checks("slow", [str(tmp_path / "test_slow.py")], timeout=3)
    assert check.passed is False and "ran past 3 s and was stopped" in check.detail
