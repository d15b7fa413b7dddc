"""``workbench kernel install``: the `workbench` Jupyter kernelspec for this interpreter."""

from __future__ import annotations

import argparse
import sys


def add(commands: argparse._SubParsersAction) -> None:
    kernel = commands.add_parser("kernel", help="manage the `workbench` Jupyter kernelspec")
    kernel_commands = kernel.add_subparsers(title="kernel commands", metavar="ACTION", required=True)
    install = kernel_commands.add_parser("install", help="install the kernelspec for this interpreter")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--sys-prefix", action="store_true", help="into this environment (the default)")
    where.add_argument("--user", action="store_true", help="into this user's Jupyter directory")
    where.add_argument("--prefix", help="into the environment at PREFIX")
    install.set_defaults(command="kernel install", run=_kernel_install)


def _kernel_install(args: argparse.Namespace) -> int:
    from workbench.kernelspec import MissingKernelspecError, install_kernelspec

    try:
        path = install_kernelspec(user=args.user, prefix=args.prefix)
    except MissingKernelspecError as error:
        print(f"workbench kernel install: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a prefix that cannot be created or written
        where = args.prefix or ("your user's Jupyter directory" if args.user else sys.prefix)
        print(
            f"workbench kernel install: error: cannot write the kernelspec under {where} "
            f"({error.strerror or error}); choose a writable --prefix, or --user",
            file=sys.stderr,
        )
        return 2
    print(f"installed kernelspec 'workbench' in {path} (runs {sys.executable})")
    return 0
