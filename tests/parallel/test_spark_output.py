"""torchrun's failure report as TorchDistributor relays it, and what the driver's terminal shows of it."""

import io
import threading

from workbench.parallel.launching.spark_output import TorchrunReports

REPORT = """E1126 23:44:49.993000 27157 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: -9) local_rank: 0 (pid: 27162) of binary: /usr/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
/tmp/tmp126k0pzi/train.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_23:44:49
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 27163)
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_23:44:49
  host      : localhost
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 27162)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 27162
======================================================
"""

USER_TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 3, in train
    raise ValueError("my own bug")
ValueError: my own bug
"""


def _through(text, pieces=None, drop_started=False):
    out = io.StringIO()
    stream = TorchrunReports(out, drop_started)
    pieces = pieces or [text]
    for piece in pieces:
        stream.write(piece)
    stream.close_report()
    return out.getvalue()


def test_a_report_is_one_line_naming_the_root_cause_and_the_users_own_output_passes():
    said = "step 1\n" + USER_TRACEBACK + REPORT + "after\n"
    assert _through(said) == (
        "step 1\n" + USER_TRACEBACK + "workbench: rank 1's process ended with exit code -9 (SIGKILL)\nafter\n"
    )
    by_character = _through(said, pieces=list(said))  # written in any pieces, the same lines come out
    assert by_character == _through(said)


def test_what_is_held_comes_out_at_the_end_and_start_lines_drop_only_when_asked():
    assert _through("Traceback (most recent call last):\n  File x\nno newline") == (
        "Traceback (most recent call last):\n  File x\nno newline"
    )
    started = "workbench: rank 0 of 2 runs on node7\n"
    assert _through(started) == started
    assert _through(started, drop_started=True) == ""


def test_lines_written_from_two_threads_stay_whole():
    out = io.StringIO()
    stream = TorchrunReports(out)

    def write(name):
        for index in range(300):
            stream.write(f"{name} line {index}\n")

    threads = [threading.Thread(target=write, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = out.getvalue().splitlines()
    assert sorted(lines) == sorted(f"{name} line {index}" for name in "ab" for index in range(300))


def test_another_ranks_lines_inside_a_report_pass_and_the_report_is_still_one_line():
    """Both ranks' torchrun write to the driver's stream: under load a rank's line lands inside the other's
    traceback or report (seen in CI), which let the rest of the report through, or swallowed the line."""
    lost = "workbench: error: rank 0 lost the connection to 127.0.0.1\n"
    lines = REPORT.splitlines(keepends=True)
    inside_traceback = "".join([*lines[:3], lost, *lines[3:]])
    assert (
        _through(inside_traceback) == lost + "workbench: rank 1's process ended with exit code -9 (SIGKILL)\n"
    )
    ended = "workbench: rank 0's process ended with exit code 1\n"
    inside_report = "".join([*lines[:10], ended, *lines[10:]])
    assert (
        _through(inside_report) == ended + "workbench: rank 1's process ended with exit code -9 (SIGKILL)\n"
    )
    started = "workbench: rank 0 of 2 runs on node7\n"
    assert _through("".join([*lines[:3], started, *lines[3:]]), drop_started=True) == (
        "workbench: rank 1's process ended with exit code -9 (SIGKILL)\n"
    )
