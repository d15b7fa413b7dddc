"""``workbench train PRESET --find-lr``: the learning-rate range test on a preset (with the options given) in
this process, instead of training it: what it saw, decade by decade, and the command that trains at the
suggested lr."""

from __future__ import annotations

import argparse
import math
import shlex

_NOT_WITH = {  # options a range test cannot honour, and why
    "run_name": "--run (a range test writes no run)",
    "resume": "--resume (a range test writes no run)",
    "log": "--log (a range test writes no run)",
}


def find_lr_here(args: argparse.Namespace) -> int:
    """Run the range test on `args`' preset; print its table, its verdict and the command to train with."""
    from workbench.cli.train_local import experiment_from
    from workbench.tables import text_table
    from workbench.train import find_lr
    from workbench.train.progress import ConsoleProgress

    refused = [said for name, said in _NOT_WITH.items() if getattr(args, name)]
    if args.strategy != "single":
        refused.append(f"--strategy {args.strategy} (it runs one process)")
    if refused:
        raise ValueError(
            f"--find-lr takes no {', '.join(refused)}: find the lr first, then train with the printed command"
        )
    e = experiment_from(args)
    result = find_lr(e.model, e.loss_fn, e.splits, e.config, callbacks=[ConsoleProgress()])
    rows = [
        [f"{result.lrs[i]:.3g}", f"{result.losses[i]:.4f}", f"{result.smoothed[i]:.4f}"]
        for i in _decades(result.lrs)
    ]
    print(text_table(["lr", "loss", "smoothed"], rows))
    print(result)
    if result.suggestion is None:
        return 1
    words = [*_without_lr(args.kept_command), "--lr", f"{result.suggestion:.3g}"]
    print(f"train at it: workbench {shlex.join(words)}")
    return 0


def _decades(lrs: tuple[float, ...]) -> list[int]:
    """The first step at each new decade of lr, and the last step."""
    firsts = {math.floor(math.log10(lr)): i for i, lr in reversed(list(enumerate(lrs)))}
    return sorted({*firsts.values(), len(lrs) - 1}) if lrs else []


def _without_lr(words: list[str]) -> list[str]:
    """`words` without their ``--lr VALUE``."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--lr":
            skip = True
        elif not word.startswith("--lr="):
            out.append(word)
    return out
