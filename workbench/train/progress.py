"""Progress bars: text for terminals, CI logs and a blocking `launch` in a notebook (a tqdm bar with loss, lr
and the last evaluation), and tqdm's widget bar for a `Trainer.fit()` in a notebook (`fit_progress`).

`workbench train` writes text to stderr with a line per evaluation (a log to read back); `launch` to stdout
as one line that updates, the last evaluation in it (a notebook paints stderr like an error, and 500
epochs would be 500 lines). Where the text goes to a file or a pipe (`2> train.log`, a Slurm job's output),
the bar is a plain line every `log_every_s` seconds and one at the end: no carriage returns in a log."""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from tqdm import tqdm

from workbench._jupyter import running_kernel
from workbench._validate import check_nonnegative
from workbench.train.events import Callback, CallbackList, Event, evaluation_metrics
from workbench.train.supervision import is_supervised

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class ConsoleProgress(Callback):
    """A tqdm progress bar over optimizer steps; prints each evaluation and the final status.

    On a terminal or in a notebook the bar redraws itself every `mininterval` seconds; written to a file or
    a pipe, it is a line of its own every `log_every_s` seconds and at the end (`ProgressLines`).

    Example:
        >>> import io
        >>> progress = ConsoleProgress(file=io.StringIO())
        >>> progress.on_fit_start({"total_steps": 10, "start_step": 0, "epochs": 1, "run": None})
        >>> progress.on_step({"step": 10, "epoch": 0, "loss": 0.5, "lr": 0.1})
        >>> progress.on_fit_end({"status": "finished", "step": 10, "error": None})
        >>> "finished at step 10" in progress.file.getvalue()
        True
    """

    shows_progress = True

    def __init__(
        self,
        file: IO[str] | None = None,
        mininterval: float = 0.5,
        *,
        one_line: bool = False,
        log_every_s: float = 30.0,
    ) -> None:
        self.file = file if file is not None else sys.stderr
        self.mininterval = check_nonnegative("mininterval", mininterval)
        self.log_every_s = check_nonnegative("log_every_s", log_every_s)
        self.one_line = one_line  # evaluations shown in the bar, not as lines of their own
        self._bar: tqdm | ProgressLines | None = None
        self._postfix: dict[str, str] = {}

    def on_fit_start(self, info: Event) -> None:
        start, total = info["start_step"], info.get("total_steps")
        if start and not self.one_line and info.get("rank", 0) == 0:  # a log read after a crash says where
            of = f" of {total}" if total else ""
            print(f"resumed from the checkpoint at step {start}{of}", file=self.file)
        self._bar = self._open_bar(info)

    def _open_bar(self, info: Event) -> tqdm | ProgressLines:
        if redraws(self.file):
            return tqdm(**self._bar_options(info), file=self.file, dynamic_ncols=True)
        return ProgressLines(self.file, self.log_every_s, **self._bar_options(info))

    def _bar_options(self, info: Event) -> dict[str, Any]:
        """What every bar of a fit shows: its steps, where it starts, its name; redrawn each `mininterval`."""
        total, initial, desc = info["total_steps"], info["start_step"], info.get("run") or "train"
        return dict(total=total, initial=initial, unit="step", desc=desc, mininterval=self.mininterval)

    def on_step(self, metrics: Event) -> None:
        if self._bar is None or metrics.get("rank", 0) != 0:  # a launch relays every rank's steps
            return
        self._postfix.update(epoch=metrics["epoch"], loss=f"{metrics['loss']:.4g}", lr=f"{metrics['lr']:.3g}")
        self._bar.set_postfix(self._postfix, refresh=False)  # before the update that may draw it
        self._bar.update(metrics["step"] - self._bar.n)

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


class NotebookProgress(ConsoleProgress):
    """The same bar as a widget in the notebook cell that runs the fit: one line that updates, the last
    evaluation in it; green when the fit finished, red when it stopped early or failed.

    Only the widget is shown, with no text copy: a cell's text output (what nbval compares) stays as it was.
    """

    def __init__(self, mininterval: float = 0.5) -> None:
        super().__init__(sys.stdout, mininterval, one_line=True)

    def _open_bar(self, info: Event) -> Any:
        from IPython.display import display
        from tqdm.notebook import tqdm as widget_bar

        bar = widget_bar(**self._bar_options(info), display=False)
        display({WIDGET_VIEW: bar.container._repr_mimebundle_()[WIDGET_VIEW]}, raw=True)
        return bar

    def on_fit_end(self, summary: Event) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            bar.set_description(f"{bar.desc} {summary['status']} at step {summary['step']}", refresh=False)
            bar.close()


class ProgressLines:
    """tqdm's bar as lines of text for a file that keeps every character (a log, a pipe): a line when
    `every_s` seconds have passed since the last one, and one at the end; the calls `ConsoleProgress`
    makes on a tqdm bar.

    Example:
        >>> import io
        >>> lines = ProgressLines(io.StringIO(), 0.0, total=4, initial=0, unit="step", desc="train")
        >>> lines.update(2)
        >>> lines.set_postfix({"loss": "0.5"})
        >>> lines.close()
        >>> print(lines.file.getvalue(), end="")
        train:  50%|#####     | 2/4 [00:00<00:00, ...step/s]
        train:  50%|#####     | 2/4 [00:00<00:00, ...step/s, loss=0.5]
    """

    def __init__(
        self, file: IO[str], every_s: float, *, total: int, initial: int, unit: str, desc: str, **_: Any
    ) -> None:
        self.file, self.every_s = file, every_s
        self.total, self.initial, self.n, self.unit, self.desc = total, initial, initial, unit, desc
        self.ascii = "utf" not in (getattr(file, "encoding", None) or "").lower()  # blocks only in UTF-8
        self._postfix = ""
        self._start = self._printed_at = time.monotonic()
        self._unprinted = False

    def update(self, n: int = 1) -> None:
        self.n += n
        self._unprinted = True
        if time.monotonic() - self._printed_at >= self.every_s:
            self._print()

    def set_postfix(self, postfix: dict[str, Any], refresh: bool = False) -> None:
        self._postfix = ", ".join(f"{key}={value}" for key, value in postfix.items())
        self._unprinted = True

    def write(self, line: str, file: IO[str] | None = None) -> None:
        print(line, file=file or self.file, flush=True)

    def close(self) -> None:
        if self._unprinted:
            self._print()

    def _print(self) -> None:
        self._printed_at, self._unprinted = time.monotonic(), False
        meter = tqdm.format_meter(
            self.n,
            self.total,
            self._printed_at - self._start,
            prefix=self.desc,
            unit=self.unit,
            postfix=self._postfix,
            initial=self.initial,
            ascii=self.ascii,
        )
        print(meter, file=self.file, flush=True)


def redraws(file: IO[str]) -> bool:
    """Whether `file` shows a bar that redraws itself with carriage returns: a terminal, or the notebook
    cell of this kernel's own output."""
    isatty = getattr(file, "isatty", None)
    if callable(isatty) and isatty():
        return True
    return running_kernel() is not None and file in (sys.stdout, sys.stderr)


def in_a_notebook() -> bool:
    """True in a Jupyter kernel's own process (not in a process it started, such as a launcher's rank)."""
    return running_kernel() is not None and multiprocessing.parent_process() is None


def fit_progress(progress: bool | None, callbacks: CallbackList, *, is_main: bool) -> Callback | None:
    """The bar a `Trainer` shows for one fit (`progress`: True, False, or None to decide here).

    None where no bar is wanted: ``progress=False``, a rank other than the main one, a launcher's worker
    (the launcher shows progress), or `callbacks` that show it (a Dashboard). Else in a notebook a widget
    bar; in a terminal, or anywhere with ``progress=True``, text on stderr; with ``progress=None`` and
    stderr not a terminal (a pipe, a CI log), none.

    Example:
        >>> from workbench.train.events import CallbackList
        >>> fit_progress(None, CallbackList([ConsoleProgress()]), is_main=True) is None
        True
        >>> type(fit_progress(True, CallbackList(), is_main=True)).__name__
        'ConsoleProgress'
    """
    if progress is False or not is_main or is_supervised() or callbacks.shows_progress:
        return None
    if in_a_notebook():
        return NotebookProgress()
    if progress or sys.stderr.isatty():
        return ConsoleProgress(one_line=True)
    return None


@contextlib.contextmanager
def fit_progress_shown(progress: bool | None, events: CallbackList, *, is_main: bool) -> Iterator[None]:
    """Subscribe `fit_progress`'s bar, if any, to `events` for the duration of one fit."""
    bar = fit_progress(progress, events, is_main=is_main)
    if bar is not None:
        events.callbacks.append(bar)
    try:
        yield
    finally:
        if bar is not None:
            events.callbacks.remove(bar)
