"""Every pytest run (`make test`, nbval, the browser test's JupyterLab) runs the tutorials at their short CI
sizes: WORKBENCH_QUICK=1, read by the notebooks' parameter cells, inherited by the kernels they start.

A notebook run by nbval here (the tour on the installed wheel, `workbench gpu-check`) runs the exercises'
reference answers (WORKBENCH_ANSWERS=1: the ``%%answer`` cells run). The browser test's JupyterLab drops it:
Run All goes as a learner's does, with the stubs; then the test turns the answers on in the kernel and runs
what the stubs held back (tests/browser/test_notebook_in_browser.py)."""

import os

pytest_plugins = ["workbench.bench.nbval_stderr"]  # a failed notebook cell shows what it printed on stderr

os.environ.setdefault("WORKBENCH_QUICK", "1")
os.environ.setdefault("WORKBENCH_ANSWERS", "1")
