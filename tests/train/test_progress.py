"""ConsoleProgress: a line per evaluation for `workbench train`'s log, or one updating line for `launch`;
redrawn on a terminal, plain lines in a file."""

import io
import re

from workbench.train.progress import ConsoleProgress


def _drive(progress):
    progress.on_fit_start({"total_steps": 20, "start_step": 0, "epochs": 2, "run": "x"})
    for epoch in range(2):
        progress.on_step({"step": 10 * (epoch + 1), "epoch": epoch, "loss": 0.5, "lr": 0.1})
        progress.on_eval({"step": 10, "epoch": epoch, "split": "val", "loss": 0.25, "accuracy": 0.9})
    progress.on_fit_end({"status": "finished", "step": 20, "error": None})
    return progress.file.getvalue()


def test_evaluations_are_lines_of_their_own_by_default():
    text = _drive(ConsoleProgress(file=io.StringIO(), mininterval=0))
    assert "epoch 0 val: loss 0.2500, accuracy 0.9000" in text and "epoch 1 val:" in text


def test_one_line_keeps_the_last_evaluation_in_the_bar():
    text = _drive(ConsoleProgress(file=io.StringIO(), mininterval=0, one_line=True))
    assert "epoch 0 val:" not in text and "val=loss 0.2500, accuracy 0.9000" in text
    assert text.count("\n") == 2 and text.endswith("finished at step 20\n")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_one_redrawn_bar_and_a_file_plain_lines_every_log_every_s():
    redrawn = _drive(ConsoleProgress(file=_Terminal(), mininterval=0))
    assert "\r" in redrawn and "20/20" in redrawn.split("\r")[-2]
    logged = _drive(ConsoleProgress(file=io.StringIO(), mininterval=0))  # a run shorter than log_every_s
    assert "\r" not in logged
    meter, status = logged.splitlines()[-2:]
    assert re.fullmatch(r"x: 100%\|#+\| 20/20 \[00:00<00:00, .*step/s, epoch=1, loss=0.5, lr=0.1\]", meter)
    assert status == "finished at step 20"
    each_step = _drive(ConsoleProgress(file=io.StringIO(), log_every_s=0))
    meters = [line for line in each_step.splitlines() if "/20 [" in line]
    assert [meter.split("| ")[1].split(" ")[0] for meter in meters] == ["10/20", "20/20"], each_step
    assert "\r" not in each_step
