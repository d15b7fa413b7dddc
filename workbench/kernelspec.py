"""Install the ``workbench`` Jupyter kernelspec (``workbench/resources/kernelspec``) for this interpreter.

The kernelspec travels inside the installed package, and also as wheel data
(``share/jupyter/kernels/workbench``, as ipykernel ships its own), so installing the wheel registers it with
the Jupyter of that environment. That ``kernel.json`` starts ``python``, which Jupyter takes as its own
interpreter; installing it here rewrites that to the absolute path of the interpreter doing the install
(the project's ``.venv`` under ``make lab``/``make test``), so JupyterLab and nbval start the kernel in the
right environment whatever PATH they have.

The kernel's environment sets ``MALLOC_TOP_PAD_`` (256 MiB): glibc then keeps that much freed memory at
the top of each heap instead of handing it back to the OS after every step and page-faulting it back in
the next (`workbench bench kernel-env` measures it; training on a second thread, `Dashboard.start`, lost
more to OpenMP's idle threads: `workbench.devices.openmp`). The cost: the kernel's resident memory may
stay up to 256 MiB per malloc arena above what it uses. Other C libraries ignore
the variable. ``workbench doctor`` shows whether it is in effect.

Installing into an environment (not ``--user``) also writes JupyterLab's ``overrides.json`` there, so the
lab that environment runs never asks "get notified about Jupyter news?" nor checks for updates.

    $ workbench kernel install              # into this environment (sys.prefix), what make does
    $ workbench kernel install --user       # visible to every Jupyter of this user
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from workbench._distribution import DISTRIBUTION

KERNEL_NAME = "workbench"
SOURCE_DIR = Path(__file__).resolve().parent / "resources" / "kernelspec"
# JupyterLab's own settings: no news pop-up, no update check (both fetch from the internet).
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}
}


class MissingKernelspecError(FileNotFoundError):
    """The kernelspec to install is not there (the message names the missing file)."""


def install_kernelspec(
    *, user: bool = False, prefix: str | None = None, source: Path | None = None, python: str | None = None
) -> Path:
    """Install the kernelspec and return the directory it went to.

    Args:
        user: install for this user (``~/.local/share/jupyter``) instead of into ``prefix``.
        prefix: environment prefix to install into; default ``sys.prefix`` (this virtual environment).
        source: the kernelspec directory to install (holds ``kernel.json`` and logos); default the
            package's own, `SOURCE_DIR`.
        python: interpreter the kernel runs; default the one running this function.

    Raises:
        MissingKernelspecError: ``source`` has no ``kernel.json`` (an install that lost its package data).
        ValueError: both ``user`` and ``prefix`` given.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    if user and prefix:
        raise ValueError("give either user=True or prefix, not both")
    spec = read_kernelspec(source)
    source = SOURCE_DIR if source is None else Path(source)
    spec["argv"][0] = python or sys.executable
    with tempfile.TemporaryDirectory() as staging:
        staged = Path(staging) / KERNEL_NAME
        shutil.copytree(source, staged)
        (staged / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        installed = KernelSpecManager().install_kernel_spec(
            str(staged), kernel_name=KERNEL_NAME, user=user, prefix=None if user else (prefix or sys.prefix)
        )
    if not user:
        install_lab_overrides(prefix or sys.prefix)
    return Path(installed)


def read_kernelspec(source: Path | None = None) -> dict[str, Any]:
    """The ``kernel.json`` in `source` (default the package's own, `SOURCE_DIR`) as a dict.

    Raises:
        MissingKernelspecError: `source` has no ``kernel.json`` (an install that lost its package data).
    """
    spec_file = Path(SOURCE_DIR if source is None else source) / "kernel.json"
    if not spec_file.is_file():
        fix = (
            f"this installation of workbench lacks its package data; reinstall it ({DISTRIBUTION})"
            if source is None
            else "pass source=<a directory holding kernel.json>"
        )
        raise MissingKernelspecError(f"no kernelspec at {spec_file}: {fix}")
    return json.loads(spec_file.read_text(encoding="utf-8"))


def install_lab_overrides(prefix: str) -> Path:
    """Merge `LAB_OVERRIDES` into ``<prefix>/share/jupyter/lab/settings/overrides.json``; return its path.

    Settings already in the file are kept unless they are the ones set here.
    """
    path = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    current = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for plugin, settings in LAB_OVERRIDES.items():
        current[plugin] = {**current.get(plugin, {}), **settings}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    return path
