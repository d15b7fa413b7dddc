import subprocess
import sys

# Run in a fresh interpreter: this test process has already imported everything.
CODE = """
import os, sys, threading
before = dict(os.environ)
import workbench, workbench.data, workbench.devices, workbench.cli, workbench.kernelspec, workbench.tables
import workbench.train, workbench.monitor, workbench.widgets.dashboard, workbench.bench.trainer
import workbench.kernels, workbench.bench.kernels, workbench.bench.data_parallel
import workbench.parallel.launching.launcher
assert dict(os.environ) == before, "importing workbench changed the environment"
assert "numba" not in sys.modules, "importing workbench imported numba"
assert threading.active_count() == 1, "importing workbench started a thread"
from workbench.devices import device_report
device_report()
assert dict(os.environ) == before, "device_report changed the environment"
assert "numba" not in sys.modules, "device_report imported numba in this process"
import torch
assert not torch.cuda.is_initialized(), "device_report initialised CUDA in this process"
from workbench.widgets import Dashboard
from workbench.presets import build_experiment
from workbench.train import Trainer
e = build_experiment("regression-linear", n_samples=100, device="cpu")
dashboard = Dashboard(Trainer(e.model, e.loss_fn, e.splits, e.config))
assert not torch.cuda.is_initialized(), "building a Dashboard initialised CUDA in this process"
from workbench.parallel import Launch
Dashboard(Launch(lambda strategy: None, 1, verbose=False))
assert not torch.cuda.is_initialized(), "a Dashboard for a Launch initialised CUDA in this process"
assert threading.active_count() == 1, "building a Dashboard started a thread"
print("clean")
"""


def test_imports_and_the_report_have_no_side_effects():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"
