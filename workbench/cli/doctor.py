"""``workbench doctor`` (what this machine offers) and ``workbench gpu-check`` (the GPU check)."""

from __future__ import annotations

import argparse
import dataclasses
import json


def add(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser("doctor", help="print what this machine offers for training")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(command="doctor", run=_doctor)

    gpu_check = commands.add_parser(
        "gpu-check", help="check every GPU path on this machine's GPU and write the report (docs/gpu)"
    )
    from workbench.bench.gpu_check import add_arguments as add_gpu_check_arguments

    add_gpu_check_arguments(gpu_check)
    gpu_check.set_defaults(command="gpu-check", run=_gpu_check)


def _doctor(args: argparse.Namespace) -> int:
    from workbench.devices import device_report

    report = device_report()
    if args.json:
        print(json.dumps(dataclasses.asdict(report), indent=2, default=str))
    else:
        print(report)
    return 0


def _gpu_check(args: argparse.Namespace) -> int:
    from workbench.bench.gpu_check import run

    return run(args)
