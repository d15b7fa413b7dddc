"""Install the ``workbench`` Jupyter kernelspec (``kernels/workbench``) so it runs this interpreter.

The checked-in ``kernel.json`` starts ``python`` from PATH; installing rewrites that to the absolute path
of the interpreter doing the install (the project's ``.venv`` under ``make lab``/``make test``), so
JupyterLab and nbval start the kernel in the right environment whatever PATH they have.

    $ workbench kernel install              # into this environment (sys.prefix), what make does
    $ workbench kernel install --user       # visible to every Jupyter of this user
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

KERNEL_NAME = "workbench"
SOURCE_DIR = Path(__file__).resolve().parent.parent / "kernels" / KERNEL_NAME


def install_kernelspec(
    *, user: bool = False, prefix: str | None = None, source: Path = SOURCE_DIR, python: str | None = None
) -> Path:
    """Install the kernelspec and return the directory it went to.

    Args:
        user: install for this user (``~/.local/share/jupyter``) instead of into ``prefix``.
        prefix: environment prefix to install into; default ``sys.prefix`` (this virtual environment).
        source: the kernelspec directory to install (holds ``kernel.json`` and logos).
        python: interpreter the kernel runs; default the one running this function.

    Raises:
        FileNotFoundError: ``source`` has no ``kernel.json`` (e.g. workbench installed without its checkout).
        ValueError: both ``user`` and ``prefix`` given.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    if user and prefix:
        raise ValueError("give either user=True or prefix, not both")
    spec_file = Path(source) / "kernel.json"
    if not spec_file.is_file():
        raise FileNotFoundError(
            f"no kernelspec at {spec_file}; run this from a workbench checkout or pass source=<dir>"
        )
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec["argv"][0] = python or sys.executable
    with tempfile.TemporaryDirectory() as staging:
        staged = Path(staging) / KERNEL_NAME
        shutil.copytree(source, staged)
        (staged / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        installed = KernelSpecManager().install_kernel_spec(
            str(staged), kernel_name=KERNEL_NAME, user=user, prefix=None if user else (prefix or sys.prefix)
        )
    return Path(installed)
