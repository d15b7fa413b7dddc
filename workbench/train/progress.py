"""Progress as text, for terminals, CI logs and a blocking `launch` in a notebook: a tqdm bar with loss, lr
and the last evaluation. It needs no widgets, so any layer may print it (`workbench train`, `launch`).

`workbench train` writes it to stderr with a line per evaluation (a log to read back); `launch` to stdout
as one line that updates, the last evaluation in it (a notebook paints stderr like an error, and 500
epochs would be 500 lines)."""

from __future__ import annotations

import sys
from typing import IO

from tqdm import tqdm

from workbench._validate import check_nonnegative
from workbench.train.events import Callback, Event, evaluation_metrics


class ConsoleProgress(Callback):
    """A tqdm progress bar over optimizer steps; prints each evaluation and the final status.

    Example:
        >>> import io
        >>> progress = ConsoleProgress(file=io.StringIO())
        >>> progress.on_fit_start({"total_steps": 10, "start_step": 0, "epochs": 1, "run": None})
        >>> progress.on_step({"step": 10, "epoch": 0, "loss": 0.5, "lr": 0.1})
        >>> progress.on_fit_end({"status": "finished", "step": 10, "error": None})
        >>> "finished at step 10" in progress.file.getvalue()
        True
    """

    def __init__(
        self, file: IO[str] | None = None, mininterval: float = 0.5, *, one_line: bool = False
    ) -> None:
        self.file = file if file is not None else sys.stderr
        self.mininterval = check_nonnegative("mininterval", mininterval)
        self.one_line = one_line  # evaluations shown in the bar, not as lines of their own
        self._bar: tqdm | None = None
        self._postfix: dict[str, str] = {}

    def on_fit_start(self, info: Event) -> None:
        self._bar = tqdm(
            total=info["total_steps"],
            initial=info["start_step"],
            unit="step",
            desc=info.get("run") or "train",
            file=self.file,
            mininterval=self.mininterval,
            dynamic_ncols=True,
        )

    def on_step(self, metrics: Event) -> None:
        if self._bar is None or metrics.get("rank", 0) != 0:  # a launch relays every rank's steps
            return
        self._bar.update(metrics["step"] - self._bar.n)
        self._postfix.update(epoch=metrics["epoch"], loss=f"{metrics['loss']:.4g}", lr=f"{metrics['lr']:.3g}")
        self._bar.set_postfix(self._postfix, refresh=False)

    def on_eval(self, metrics: Event) -> None:
        parts = [f"{key} {value:.4f}" for key, value in evaluation_metrics(metrics).items()]
        line = f"epoch {metrics['epoch']} {metrics['split']}: " + ", ".join(parts)
        if self.one_line and self._bar is not None:
            self._postfix[metrics["split"]] = ", ".join(parts)
            self._bar.set_postfix(self._postfix, refresh=False)
        elif self._bar is not None:
            self._bar.write(line, file=self.file)
        else:
            print(line, file=self.file)

    def on_fit_end(self, summary: Event) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        line = f"{summary['status']} at step {summary['step']}"
        if summary.get("error"):
            line += f": {summary['error']}"
        print(line, file=self.file)
