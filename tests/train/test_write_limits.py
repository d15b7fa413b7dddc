"""A run that cannot write its files stops with one line naming the file, the limit and the fix (issue 44:
past ``ulimit -f`` metrics.jsonl raised a bare OSError from deep in the loop, and a checkpoint was said to
have hit a full disk)."""

from __future__ import annotations

import resource
import subprocess
import sys

SCRIPT = """
import torch, torch.nn.functional as F
from torch.utils.data import TensorDataset
from workbench.train import TrainConfig, Trainer
width, samples = {width}, {samples}
x, y = torch.randn(samples, width), torch.randn(samples, 1)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
try:
    Trainer(model, F.mse_loss, TensorDataset(x, y), TrainConfig(epochs={epochs}, batch_size=8, log_every=1),
            run="r", runs_dir="runs").fit()
except OSError as error:
    print(error.strerror)
"""


def _run_with_file_limit(tmp_path, limit_bytes: int, **sizes) -> str:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))

    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(**sizes)], cwd=tmp_path, capture_output=True, text=True,
        preexec_fn=limit, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_a_metrics_log_past_the_file_size_limit_names_the_file_and_the_limit(tmp_path):
    said = _run_with_file_limit(tmp_path, 16 * 1024, width=4, samples=64, epochs=50)
    assert said == (
        "cannot write runs/r/metrics.jsonl: it reached this process's file-size limit (ulimit -f: 16,384 "
        "bytes); raise the limit, then resume the run (fit(resume=True), or --resume)"
    )


def test_a_checkpoint_past_the_file_size_limit_is_not_called_a_full_disk(tmp_path):
    said = _run_with_file_limit(tmp_path, 256 * 1024, width=300, samples=16, epochs=1)
    assert said.startswith("checkpoint.pt outgrew this process's file-size limit (ulimit -f: 262,144 bytes)")
    assert "the previous checkpoint is kept" in said and "no space left" not in said
