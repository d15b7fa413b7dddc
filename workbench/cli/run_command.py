"""The `workbench train` command a run was started with, kept in its folder (``command.json``) once its fit
has started: `workbench train --run NAME --resume` goes on with that preset and those options (the ones
given now win), and `workbench runs` prints that command for a run a kill or a time limit cut short.

The command kept is the preset and each option that differs from its default, as parsed (`canonical`):
resuming again and again keeps it as short as the first.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("preset", nargs="?")
    >>> _ = parser.add_argument("--epochs", type=int)
    >>> _ = parser.add_argument("--run", dest="run_name")
    >>> _ = parser.add_argument("--resume", action="store_true")
    >>> options = command_options(parser)
    >>> first = canonical(parser.parse_args(["digits-mlp", "--epochs", "3", "--run", "a"]), options)
    >>> first
    ['train', 'digits-mlp', '--epochs', '3', '--run', 'a']
    >>> again = merged_command(first, ["train", "--run", "a", "--resume", "--epochs", "5"])
    >>> canonical(parser.parse_args(again[1:]), options)
    ['train', 'digits-mlp', '--epochs', '5', '--run', 'a']
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMAND_FILE = "command.json"
# what one start asks, not what a run is
_ONE_START_ONLY = ("list", "resume", "overwrite", "print_command", "find_lr")


@dataclass(frozen=True)
class CommandOption:
    """One option of `workbench train`, as `canonical` writes it back."""

    dest: str  # its attribute on the parsed arguments
    flag: str  # how it is written, e.g. "--epochs"
    kind: str  # "switch" (store_true), "repeated" (append) or "value"
    default: Any


def command_options(parser: argparse.ArgumentParser) -> tuple[CommandOption, ...]:
    """The options of `parser` (the positional preset and --help aside)."""
    options = []
    for action in parser._actions:  # argparse keeps no public list
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = {argparse._StoreTrueAction: "switch", argparse._AppendAction: "repeated"}.get(
            type(action), "value"
        )
        options.append(CommandOption(action.dest, action.option_strings[0], kind, action.default))
    return tuple(options)


def canonical(args: argparse.Namespace, options: tuple[CommandOption, ...]) -> list[str]:
    """``train``, the preset, and each option whose value differs from its default (not a start's own
    --resume, --overwrite, --list or --print-command)."""
    words = ["train", *([args.preset] if args.preset is not None else [])]
    for option in options:
        value = getattr(args, option.dest, option.default)
        if option.dest in _ONE_START_ONLY or value == option.default:
            continue
        if option.kind == "switch":
            words.append(option.flag)
        elif option.kind == "repeated":
            words += [word for item in value for word in (option.flag, str(item))]
        else:
            words += [option.flag, str(value)]
    return words


@dataclass(frozen=True)
class RecordedCommand:
    """A run's `workbench train` arguments (from ``train`` on, without a start's own flags) and the
    launcher that started each rank with them (None: the command launched its own processes)."""

    argv: list[str]
    launcher: str | None = None

    def resume_line(self, run: str, runs_dir: str) -> str:
        """The command that goes on from the run's checkpoint, e.g. ``workbench train --run a --resume``."""
        folder = [] if runs_dir == "runs" else ["--runs-dir", runs_dir]
        name = "--run" if self.launcher is None else "--run-name"  # torchrun takes --run for its --run-path
        line = shlex.join(["workbench", "train", name, run, *folder, "--resume"])
        if self.launcher is None:
            return line
        return f"{line} (each rank's command under {self.launcher}, as before)"


def merged_command(recorded: list[str], given: list[str]) -> list[str]:
    """The recorded arguments, then those `given` now (both from ``train`` on): argparse keeps the last
    value of an option given twice."""
    return [*recorded, *given[1:]]


def read_command(folder: Path) -> RecordedCommand | None:
    """The command recorded in the run `folder`, or None (a run trained from Python, or unreadable)."""
    try:
        recorded = json.loads((folder / COMMAND_FILE).read_text())
        argv, launcher = recorded["argv"], recorded.get("launcher")
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not (isinstance(argv, list) and argv[:1] == ["train"] and all(isinstance(w, str) for w in argv)):
        return None
    return RecordedCommand(argv, launcher if isinstance(launcher, str) else None)


class CommandRecorder:
    """A callback (rank 0's; the loop calls the hooks an object has) that writes the run's ``command.json``
    when its fit starts: only then is the folder this run's (a refused start leaves another run's file)."""

    def __init__(self, folder: Path, argv: list[str], launcher: str | None) -> None:
        self.folder, self.argv, self.launcher = folder, argv, launcher

    def on_fit_start(self, info: Any) -> None:
        from workbench.train.run_files import open_run_file

        record = json.dumps({"argv": self.argv, "launcher": self.launcher}) + "\n"
        partial = self.folder / f".{COMMAND_FILE}.{os.getpid()}"
        try:
            with os.fdopen(open_run_file(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as file:
                file.write(record)
            os.replace(partial, self.folder / COMMAND_FILE)  # a reader sees the old file or the new one
        except OSError as error:  # training goes on; only the short resume command is lost
            partial.unlink(missing_ok=True)
            warnings.warn(f"could not record the command in {self.folder}: {error}", stacklevel=2)


def say_resuming(argv: list[str]) -> None:
    """On stderr: the command a preset-less ``--resume`` runs (rank 0, or a process outside a launcher)."""
    from workbench.parallel.group.launch_env import detect_launch_env

    launch = detect_launch_env()
    if launch is None or launch.rank == 0:
        print(f"workbench train: resuming as `workbench {shlex.join(argv)}`", file=sys.stderr, flush=True)
