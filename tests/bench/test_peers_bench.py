"""`workbench bench trainer --peers`: the same training in every installed peer, beside a hand loop."""

import importlib.util

from workbench.bench import peers
from workbench.cli import main


def test_every_installed_peer_trains_and_is_timed_against_the_hand_loop():
    result = peers.benchmark_peers(repeats=2, epochs=1, n_samples=512)
    installed = [name for name, module in peers.PEERS.items() if importlib.util.find_spec(module)]
    assert list(result.seconds) == ["hand-written", "workbench Trainer", *installed]
    assert all(len(runs) == 2 and min(runs) > 0 for runs in result.seconds.values())
    assert result.ratios("hand-written") == [1.0, 1.0]
    assert result.steps == 4  # 460 training samples in batches of 128


def test_a_peer_that_is_not_installed_is_skipped_with_the_fix(monkeypatch):
    real = importlib.util.find_spec
    hidden = lambda name: None if name == "accelerate" else real(name)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hidden)
    result = peers.benchmark_peers(repeats=1, epochs=1, n_samples=256)
    assert "Accelerate" not in result.seconds
    assert "not installed (pip install accelerate, or the `peers` extra)" in result.table()


def test_the_command_prints_each_loop_as_a_ratio(capsys):
    assert main(["bench", "trainer", "--peers", "--repeats", "1", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "1.000 (1.00–1.00)" in rows["hand-written"]
    assert "≤ 1.00" in rows["workbench Trainer"]
    assert "Tip" not in out and "stopped" not in out  # the peers' own chatter stays out of the table


def test_the_peers_on_cuda_without_a_gpu_say_so_in_one_line(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "trainer", "--peers", "--device", "cuda"]) != 0
    err = capsys.readouterr().err
    assert "device='cuda' needs a CUDA GPU, and torch sees none here; use device='cpu'" in err
    assert "Traceback" not in err
