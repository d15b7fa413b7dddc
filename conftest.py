"""Every pytest run (`make test`, nbval, the browser test's JupyterLab) runs the tutorials at their short CI
sizes: WORKBENCH_QUICK=1, read by the notebooks' parameter cells, inherited by the kernels they start."""

import os

os.environ.setdefault("WORKBENCH_QUICK", "1")
