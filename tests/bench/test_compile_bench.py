"""`workbench bench compile`: eager and compiled Trainers of a preset alternate; the table shows both."""

import pytest

from workbench.bench.compile import CompileComparison, table
from workbench.cli import main


def test_the_command_times_both_and_reports_the_compile(capsys):
    """Even after this process compiled the preset's model (an earlier test, a notebook's cell), whose graphs
    the command's compile would reuse and call a 0-s compile."""
    from workbench.presets import build_experiment
    from workbench.train import Trainer

    earlier = build_experiment("digits-mlp", epochs=1, compile="default", log_every=10**6)
    Trainer(earlier.model, earlier.loss_fn, earlier.splits, earlier.config, progress=False).fit()
    assert main(["bench", "compile", "--presets", "digits-mlp", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("digits-mlp"))
    cells = row.split()
    assert float(cells[2]) > 0 and float(cells[3]) > 0  # eager and compiled ms per step
    assert cells[4].endswith("×") and cells[9] == "s" and float(cells[8]) > 0  # speed-up (range); compile s
    share, ceiling = float(cells[6].rstrip("%")) / 100, float(cells[7].rstrip("×"))
    assert 0.05 < share < 1 and ceiling == pytest.approx(1 / share, rel=0.05)  # the MLP's products take time


def test_the_speed_up_is_each_repeat_s_eager_over_compiled():
    result = CompileComparison("p", "default", 10, (2.0, 3.0, 2.0), (1.0, 2.0, 4.0), {"seconds": 5.0}, 0.8)
    assert result.speedups == [2.0, 1.5, 0.5] and result.speedup == 1.5
    assert "1.50× (0.50–2.00)  80%      1.25×" in table([result])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--presets", "nope"], "presets='nope' is not supported"),
        (["--mode", "off"], "mode='off' is not supported"),
        (["--repeats", "0"], "repeats must be an integer ≥ 1"),
    ],
)
def test_bad_values_are_named(argv, message, capsys):
    assert main(["bench", "compile", *argv]) == 2
    assert message in capsys.readouterr().err
