"""``%load_ext workbench``, then ``%ranks`` / ``%%ranks`` cells as a notebook runs them (an IPython shell)."""

import os
import signal
import threading
import time

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell

from workbench.widgets.rank_cells import RanksFailed, RanksInterrupted, render_html


@pytest.fixture(scope="module")
def shell():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    yield shell
    shell.run_cell("%ranks stop")
    InteractiveShell.clear_instance()


def _cell(shell, code, capsys):
    result = shell.run_cell(code)
    out, err = capsys.readouterr()
    return result, out + err


def test_start_run_pull_push_status_stop(shell, capsys):
    result, out = _cell(shell, "%ranks start 2 --threads 1", capsys)
    assert result.success and "ranks: 2 processes (gloo, CPU, 1 thread each); 2 of 2 alive" in out
    result, out = _cell(
        shell, "%%ranks\nt = torch.tensor([rank + 1.0])\ndist.all_reduce(t)\nprint(t)\nt + rank", capsys
    )
    assert result.success
    assert "[rank 0 · " in out and "[rank 1 · " in out
    assert out.index("[rank 0") < out.index("tensor([3.])\ntensor([3.])") < out.index("[rank 1")
    assert "tensor([4.])" in out  # rank 1's last expression
    result, out = _cell(shell, "%ranks pull t", capsys)
    assert [t.item() for t in shell.user_ns["t"]] == [3.0, 3.0]
    result, out = _cell(shell, "first = %ranks pull t --rank 1", capsys)
    assert shell.user_ns["first"].item() == 3.0 and "t = rank 1's" in out
    result, out = _cell(shell, "lr = 0.25\n%ranks push lr --on 1", capsys)
    assert "lr sent to rank(s) 1" in out
    result, out = _cell(shell, "%%ranks --on 1\nprint(lr * 4)", capsys)
    assert "[rank 1 · " in out and "1.0" in out and "[rank 0" not in out
    result, out = _cell(shell, "%ranks status", capsys)
    assert "2 of 2 alive" in out


def test_a_rank_that_raises_fails_the_cell_with_one_line_and_the_pool_goes_on(shell, capsys):
    shell.run_cell("%ranks status")
    result, out = _cell(
        shell, "%%ranks\nif rank == 1:\n    raise KeyError('missing')\nprint('ok', rank)", capsys
    )
    assert not result.success and isinstance(result.error_in_exec, RanksFailed)
    assert "ok 0" in out and 'File "<rank cell' in out and "KeyError: 'missing'" in out
    assert (
        "rank(s) 1 of 2 raised; rank 1: KeyError: 'missing' (tracebacks above); the pool keeps its ranks"
        in out
    )
    assert "rank_cells.py" not in out and "rank_pool.py" not in out  # no traceback of the magic itself
    result, out = _cell(shell, "%%ranks\nprint('again', rank)", capsys)
    assert result.success and "again 1" in out


def test_a_hung_collective_is_named_within_the_timeout_and_restart_brings_fresh_ranks(shell, capsys):
    shell.run_cell("%ranks status")
    result, out = _cell(
        shell, "%%ranks --timeout 1\nif rank == 0:\n    dist.broadcast(torch.ones(1), src=0)", capsys
    )
    assert not result.success
    assert "[rank 0 · still running]" in out and "in broadcast" in out
    assert "rank(s) 0 still running after --timeout 1 s" in out and "%ranks restart starts fresh ranks" in out
    result, out = _cell(shell, "%%ranks\nprint(1)", capsys)
    assert not result.success and "UsageError: the pool is stuck" in out
    pids = [p.pid for p in shell.magics_manager.registry["RankMagics"].pool.processes]
    result, out = _cell(shell, "%ranks restart", capsys)
    assert result.success and "restarted, fresh namespaces" in out
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_the_stop_button_interrupts_every_rank_in_one_line_and_keeps_the_pool(shell, capsys):
    shell.run_cell("%ranks status")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))  # what the stop button sends
    timer.start()
    began = time.monotonic()
    result, out = _cell(shell, "%%ranks\nimport time\nfor _ in range(600):\n    time.sleep(0.05)", capsys)
    assert time.monotonic() - began < 5
    assert isinstance(result.error_in_exec, RanksInterrupted)
    assert "interrupted on rank(s) 0, 1: 2 ended their cell, pool kept" in out and "Traceback" not in out
    assert "[rank 1 · interrupted at line 3]" in out
    result, out = _cell(shell, "%%ranks\nprint('after', rank)", capsys)
    assert result.success and "after 1" in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%ranks bogus", "invalid choice: 'bogus'"),
        ("%ranks start two", "invalid int value: 'two'"),
        ("%ranks start 2", "ranks are already running"),
        ("%%ranks --on x\n1", "expected ranks like 0,2, got 'x'"),
        ("%%ranks --on 7\n1", "ranks must be among 0..1 of this pool of 2, got [7]"),
        ("%ranks push undefined_here", "'undefined_here' is not defined in this notebook"),
        ("%ranks pull nothing", "rank 0 has no variable 'nothing'"),
    ],
)
def test_usage_errors_are_one_line(shell, capsys, line, message):
    result, out = _cell(shell, line, capsys)
    assert not result.success and message in out and "Traceback" not in out


def test_stop_leaves_no_process(shell, capsys):
    pids = [p.pid for p in shell.magics_manager.registry["RankMagics"].pool.processes]
    _, out = _cell(shell, "%ranks stop", capsys)
    assert "stopped; no process left" in out
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    _, out = _cell(shell, "%%ranks\n1", capsys)
    assert "no ranks are running; start them first" in out


def test_each_rank_is_a_collapsible_block_with_its_displays_and_errors_marked():
    from workbench.parallel.launching.rank_messages import RankCell, RankFailure

    cells = {
        0: RankCell(
            0, [("stdout", "<b>x</b>\n"), ("display", {"text/plain": "F", "text/html": "<i>fig</i>"})], 0.1
        ),
        1: RankCell(1, [], 0.2, RankFailure("ValueError", "bad", "Traceback ...\nValueError: bad")),
    }
    page = render_html(cells)
    assert page.count(" open>") == 2 and "&lt;b&gt;x&lt;/b&gt;" in page and "<i>fig</i>" in page
    assert '<details class="failed" open><summary><b>rank 1</b> · ValueError: bad' in page
    many = {r: RankCell(r, [("stdout", "hi")], 0.1) for r in range(8)}
    assert render_html(many).count(" open>") == 0  # 8 ranks: collapsed, one line each


def test_a_cell_that_only_defines_shows_nothing(shell, capsys):
    _cell(shell, "%ranks start 2 --threads 1", capsys)
    result, out = _cell(shell, "%%ranks\ndef f():\n    return rank", capsys)
    assert result.success and out == ""
    _, out = _cell(shell, "%%ranks\nf()", capsys)
    assert "[rank 1 · " in out and "\n1" in out
    _cell(shell, "%ranks stop", capsys)
