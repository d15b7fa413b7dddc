"""``workbench runs``: the runs under a runs directory, and what differs between two."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add(commands: argparse._SubParsersAction) -> None:
    runs = commands.add_parser("runs", help="the runs under a runs directory, and what differs between two")
    runs.add_argument("--runs-dir", default="runs", help="where the runs are (default: runs)")
    runs.add_argument(
        "--diff",
        nargs=2,
        metavar=("A", "B"),
        help="the settings that differ between A and B (config fields, ranks, strategy, global batch)",
    )
    runs.set_defaults(command="runs", run=_runs)


def _runs(args: argparse.Namespace) -> int:
    from workbench.cli.run_command import read_command
    from workbench.tables import text_table
    from workbench.train.metrics_log import METRICS_FILE
    from workbench.train.run_files import CHECKPOINT_FILE
    from workbench.train.runs import RUN_COLUMNS, config_diff, list_runs

    skipped: list[str] = []
    try:
        runs = list_runs(args.runs_dir, on_skip=lambda path, why: skipped.append(f"{path.name}: {why}"))
    except FileNotFoundError:
        print(
            f"workbench runs: error: no runs directory at {args.runs_dir}; train with `workbench train "
            "PRESET --run NAME` first, or name the folder that holds your runs with --runs-dir DIR",
            file=sys.stderr,
        )
        return 2
    for line in skipped:
        print(f"workbench runs: skipped {line}", file=sys.stderr)
    if args.diff is None:
        print(text_table(RUN_COLUMNS, [run.row() for run in runs]) if runs else f"no runs in {args.runs_dir}")
        saved = [run for run in runs if (run.path / CHECKPOINT_FILE).is_file()]
        cut_short = [run for run in saved if run.status in ("killed", "stopped", "failed")]
        if cut_short:  # what a person wants to know after a kill or a time limit: how to go on
            print("\nended before their fit did, and saved; to go on from the checkpoint:")
            for run in cut_short:
                recorded = read_command(run.path)
                how = "Trainer.fit(resume=True) in Python, or the command that trained it with --resume"
                print(f"  {run.name}: {recorded.resume_line(run.name, args.runs_dir) if recorded else how}")
        return 0
    by_name = {run.name: run for run in runs}
    missing = [name for name in args.diff if name not in by_name]
    if missing:
        known = ", ".join(by_name) or "none"
        folder = Path(args.runs_dir) / missing[0]
        why = f" ({folder} holds no {METRICS_FILE}: no training logged there)" if folder.is_dir() else ""
        print(
            f"workbench runs: error: no run {missing[0]!r} in {args.runs_dir}{why}; runs: {known}",
            file=sys.stderr,
        )
        return 2
    differ = config_diff([by_name[name] for name in args.diff])
    if not differ:
        print(f"{args.diff[0]} and {args.diff[1]} have the same settings")
        return 0
    rows = [[name, *(json.dumps(value) for value in values)] for name, values in differ.items()]
    print(text_table(["setting", *args.diff], rows))
    return 0
