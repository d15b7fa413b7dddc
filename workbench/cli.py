"""The ``workbench`` command (also ``python -m workbench``).

workbench doctor                  print the device report (CPU, GPUs, CUDA, numba backend)
workbench doctor --json           the same as JSON
workbench kernel install          install the `workbench` Jupyter kernelspec for this interpreter
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    from workbench import __version__

    parser = argparse.ArgumentParser(prog="workbench", description="Jupyter workbench for fast training.")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="print what this machine offers for training")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(command="doctor", run=_doctor)

    kernel = commands.add_parser("kernel", help="manage the `workbench` Jupyter kernelspec")
    kernel_commands = kernel.add_subparsers(title="kernel commands", metavar="ACTION", required=True)
    install = kernel_commands.add_parser("install", help="install the kernelspec for this interpreter")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--sys-prefix", action="store_true", help="into this environment (the default)")
    where.add_argument("--user", action="store_true", help="into this user's Jupyter directory")
    where.add_argument("--prefix", help="into the environment at PREFIX")
    install.set_defaults(command="kernel install", run=_kernel_install)
    return parser


def _doctor(args: argparse.Namespace) -> int:
    from workbench.devices import device_report

    report = device_report()
    if args.json:
        print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
    else:
        print(report)
    return 0


def _kernel_install(args: argparse.Namespace) -> int:
    from workbench.kernelspec import install_kernelspec

    path = install_kernelspec(user=args.user, prefix=args.prefix)
    print(f"installed kernelspec 'workbench' in {path} (runs {sys.executable})")
    return 0
