"""``workbench tutorials [DIR]``: copy the tutorial notebooks into a folder of yours."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys


def add(commands: argparse._SubParsersAction) -> None:
    tutorials = commands.add_parser("tutorials", help="copy the tutorial notebooks into a folder of yours")
    tutorials.add_argument(
        "folder", nargs="?", default=None, help="where to (default: ./workbench-tutorials)"
    )
    tutorials.add_argument("--force", action="store_true", help="replace notebooks you edited there")
    tutorials.set_defaults(command="tutorials", run=_tutorials)


def _tutorials(args: argparse.Namespace) -> int:
    from workbench._distribution import pip_install
    from workbench.kernelspec import KERNEL_NAME
    from workbench.tutorials import DEFAULT_FOLDER, copy_tutorials

    try:
        done = copy_tutorials(args.folder or DEFAULT_FOLDER, force=args.force)
    except OSError as error:  # edited notebooks, a file for a folder, an unwritable folder: said in one line
        print(f"workbench tutorials: error: {error.strerror or error}", file=sys.stderr)
        return 2
    folder = done.folder.resolve()
    changed = done.copied + done.replaced
    print(
        f"{_count(len(changed), 'tutorial notebook')} copied into {folder}"
        + (f" ({', '.join(done.replaced)} replaced: edited)" if done.replaced else "")
        + (f"; {len(done.unchanged)} already up to date" if done.unchanged else "")
    )
    print(f"open them:  jupyter lab {shlex.quote(str(folder))}")
    if importlib.util.find_spec("jupyterlab") is None:
        print(f"JupyterLab is not installed here: {pip_install('lab')}")
    if KERNEL_NAME not in _jupyter_kernels():
        print(f"the notebooks run on the '{KERNEL_NAME}' kernel: workbench kernel install --user")
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _jupyter_kernels() -> set[str]:
    from jupyter_client.kernelspec import KernelSpecManager

    return set(KernelSpecManager().find_kernel_specs())
