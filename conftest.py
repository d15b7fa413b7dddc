"""Every pytest run (`make test`, nbval, the browser test's JupyterLab) runs the tutorials at their short CI
sizes: WORKBENCH_QUICK=1, read by the notebooks' parameter cells, inherited by the kernels they start.

nbval runs the exercises' reference answers (WORKBENCH_ANSWERS=1: the ``%%answer`` cells run), so every
check is checked against one; the browser test's JupyterLab drops it and runs the notebooks as a learner
does, with the stubs (tests/browser/jupyterlab.py)."""

import os

os.environ.setdefault("WORKBENCH_QUICK", "1")
os.environ.setdefault("WORKBENCH_ANSWERS", "1")
