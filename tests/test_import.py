import subprocess
import sys

# Run in a fresh interpreter: this test process has already imported everything.
CODE = """
import os, sys, threading
before = dict(os.environ)
import workbench, workbench.data, workbench.devices, workbench.cli, workbench.kernelspec, workbench.tables
assert dict(os.environ) == before, "importing workbench changed the environment"
assert "numba" not in sys.modules, "importing workbench imported numba"
assert threading.active_count() == 1, "importing workbench started a thread"
from workbench.devices import device_report
device_report()
assert dict(os.environ) == before, "device_report changed the environment"
assert "numba" not in sys.modules, "device_report imported numba in this process"
import torch
assert not torch.cuda.is_initialized(), "device_report initialised CUDA in this process"
print("clean")
"""


def test_imports_and_the_report_have_no_side_effects():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"
