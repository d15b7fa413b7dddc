"""``%ranks`` and ``%%ranks``: notebook cells that run on every rank of a persistent pool.

Load with ``%load_ext workbench``, then::

    %ranks start 4                 # 4 rank processes, process group joined (gloo on CPU, nccl on GPUs)

    %%ranks
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    print(t)                       # shown per rank, one block each

    %ranks pull t                  # t = [rank 0's t, rank 1's t, ...] here (tensors on the CPU);
    t = %ranks pull t --rank 0     # also returns it: rank 0's t
    %ranks push lr                 # the notebook's lr bound on every rank
    %ranks status | stop | restart

Each rank's namespace starts with ``rank``, ``world_size``, ``device``, ``strategy`` (a `DataParallel` bound
to the pool's process group, for ``Trainer(..., strategy=strategy)``), ``torch``, ``dist`` and ``display``.
``%%ranks --on 0,2`` runs on some ranks only; ``--timeout S`` names the ranks still running after S seconds
with the line they are on and interrupts them (as the stop button does). A cell that raises on a rank shows
that rank's traceback (the cell's own frames) and fails the cell; the pool keeps its ranks.
"""

from __future__ import annotations

import argparse
import base64
import html
import re
import shlex
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from workbench._one_line import OneLine
from workbench.parallel.launching.rank_messages import CellRun, RankCell
from workbench.parallel.launching.rank_pool import PoolError, RankPool

_LIVE_EVERY_S = 0.3  # the live view redraws at most this often
_COLLAPSE_BEYOND = 4  # with more ranks, each rank's block starts collapsed


class RanksFailed(OneLine, Exception):
    """A ``%%ranks`` cell raised on some ranks (their tracebacks are in the cell's output); one line."""


class RanksInterrupted(OneLine, KeyboardInterrupt):
    """The stop button interrupted a ``%%ranks`` cell on its ranks; one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    line = _Parser(prog="%ranks", add_help=False)
    commands = line.add_subparsers(dest="command", required=True, parser_class=_Parser)
    start = commands.add_parser("start", add_help=False)
    start.add_argument("nprocs", type=int)
    start.add_argument("--backend", choices=("gloo", "nccl"))
    start.add_argument("--threads", type=int, help="torch threads per rank")
    start.add_argument("--timeout", type=float, default=300, help="collective timeout in seconds")
    for name in ("status", "stop", "restart"):
        commands.add_parser(name, add_help=False)
    pull = commands.add_parser("pull", add_help=False)
    pull.add_argument("name")
    pull.add_argument("--rank", type=int)
    push = commands.add_parser("push", add_help=False)
    push.add_argument("name")
    push.add_argument("--on", type=_rank_list)
    cell = _Parser(prog="%%ranks", add_help=False)
    cell.add_argument("--on", type=_rank_list, help="comma-separated ranks, e.g. 0,2")
    cell.add_argument("--timeout", type=float, help="seconds before the ranks still running are named")
    return line, cell


def _rank_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ranks like 0,2, got {text!r}") from None


@magics_class
class RankMagics(Magics):
    """The ``%ranks`` line magic and ``%%ranks`` cell magic; holds this kernel's pool."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.pool: RankPool | None = None
        self._line, self._cell = _parsers()

    @line_cell_magic
    def ranks(self, line: str, cell: str | None = None) -> Any:
        """``%ranks start N | status | stop | restart | pull NAME | push NAME``; ``%%ranks [--on R,..]
        [--timeout S]`` runs the cell on the ranks."""
        try:
            if cell is None:
                return self._command(self._line.parse_args(shlex.split(line)))
            return self._run_cell(self._cell.parse_args(shlex.split(line)), cell)
        except (PoolError, ValueError) as error:
            raise UsageError(str(error)) from None

    def _command(self, args: argparse.Namespace) -> Any:
        if args.command == "start":
            if self.pool is not None and self.pool.started:
                raise UsageError(f"ranks are already running ({self.pool.describe()}); %ranks stop first")
            began = time.perf_counter()
            self.pool = RankPool(
                args.nprocs, backend=args.backend, threads_per_process=args.threads, timeout_s=args.timeout
            )
            self.pool.start()
            print(f"ranks: {self.pool.describe()} (started in {time.perf_counter() - began:.2f} s)")
            return None
        if self.pool is None:
            raise UsageError("no ranks yet; start them with %ranks start N")
        if args.command == "status":
            print(f"ranks: {self.pool.describe()}")
        elif args.command == "stop":
            self.pool.stop()
            print("ranks: stopped; no process left")
        elif args.command == "restart":
            self.pool.restart()
            print(f"ranks: restarted, fresh namespaces: {self.pool.describe()}")
        elif args.command == "pull":
            value = self.pool.pull(args.name, args.rank)
            self.shell.user_ns[args.name] = value
            where = (
                f"rank {args.rank}'s" if args.rank is not None else "a list of every rank's (index = rank)"
            )
            print(f"ranks: {args.name} = {where}")
            return value
        elif args.command == "push":
            if args.name not in self.shell.user_ns:
                raise UsageError(f"{args.name!r} is not defined in this notebook; define it, then push")
            self.pool.push(args.name, self.shell.user_ns[args.name], args.on)
            ranks = args.on if args.on is not None else self.pool.ranks
            print(f"ranks: {args.name} sent to rank(s) {', '.join(map(str, ranks))}")
        return None

    def _run_cell(self, args: argparse.Namespace, code: str) -> None:
        if self.pool is None:
            raise UsageError("no ranks yet; start them with %ranks start N")
        view = _LiveView(live=getattr(self.shell, "kernel", None) is not None)
        run = self.pool.run(code, args.on, args.timeout, view.on_update)
        view.finish(run)
        if run.interrupted:
            ended = [r for r, c in run.cells.items() if c.done and r not in run.stuck]
            raise RanksInterrupted(
                f"interrupted on rank(s) {', '.join(map(str, sorted(run.cells)))}: "
                + (f"{len(ended)} ended their cell, pool kept" if not run.stuck else _stuck_line(run))
            )
        if run.timed_out_after is not None:
            running = [r for r, c in run.cells.items() if c.stacks]
            raise RanksFailed(
                f"rank(s) {', '.join(map(str, running))} still running after --timeout "
                f"{run.timed_out_after:g} s (their stacks are above); "
                + (_stuck_line(run) if run.stuck else "interrupted, pool kept")
            )
        failed = {r: c.failure for r, c in run.cells.items() if c.failure is not None}
        if failed:
            first = min(failed)
            raise RanksFailed(
                f"rank(s) {', '.join(map(str, failed))} of {self.pool.nprocs} raised; rank {first}: "
                f"{failed[first].line()} (tracebacks above); the pool keeps its ranks"
            )


def _stuck_line(run: CellRun) -> str:
    return (
        f"rank(s) {', '.join(map(str, run.stuck))} did not end (stuck in a collective?): "
        "%ranks restart starts fresh ranks"
    )


class _LiveView:
    """The cell's output, one block per rank, redrawn as replies come (in a kernel) and once at the end."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.handle: Any = None
        self._drawn_at = 0.0

    def on_update(self, run: CellRun) -> None:
        if self.live and time.monotonic() - self._drawn_at >= _LIVE_EVERY_S:
            self._draw(run.cells)

    def finish(self, run: CellRun) -> None:
        self._draw(run.cells)

    def _draw(self, cells: dict[int, RankCell]) -> None:
        silent = all(not c.items and c.failure is None and not c.stacks for c in cells.values())
        if silent and self.handle is None:  # a cell that only defines things shows nothing, as in Jupyter
            return
        bundle = {"text/plain": render_text(cells), "text/html": render_html(cells)}
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)
        self._drawn_at = time.monotonic()


def _interrupted(cell: RankCell) -> bool:
    return cell.failure is not None and cell.failure.error in ("KeyboardInterrupt", "TrainingInterrupted")


def _status(cell: RankCell) -> str:
    if _interrupted(cell):
        lines = re.findall(r'File "<rank cell \d+>", line (\d+)', cell.failure.traceback)
        return f"interrupted at line {lines[-1]}" if lines else "interrupted"
    if cell.failure is not None:
        return cell.failure.line()
    if not cell.done:
        return "running" if not cell.stacks else "still running"
    return f"{cell.seconds:.2f} s"


def render_text(cells: dict[int, RankCell]) -> str:
    """Each rank's output under a ``[rank r · status]`` header (what a terminal and nbval read)."""
    blocks = []
    for rank in sorted(cells):
        cell = cells[rank]
        body = []
        for kind, item in cell.items:
            body.append(item["text/plain"] + "\n" if kind == "display" else item)
        if cell.failure is not None and not _interrupted(cell):
            body.append(cell.failure.traceback)
        if cell.stacks:
            body.append(f"rank {rank} was here (most recent call first):\n{_trim_stack(cell.stacks)}\n")
        blocks.append(f"[rank {rank} · {_status(cell)}]\n" + "".join(body).rstrip("\n"))
    return "\n".join(blocks)


_STYLE = (
    "<style>.workbench-ranks{font-size:13px}.workbench-ranks summary{cursor:pointer;color:#555}"
    ".workbench-ranks .failed summary{color:#b00020}.workbench-ranks pre{margin:0 0 0 1em;padding:1px 4px;"
    "white-space:pre-wrap}.workbench-ranks pre.error{background:#fdecea}</style>"
)


def render_html(cells: dict[int, RankCell]) -> str:
    """One collapsible block per rank: text, displays (HTML, images) and errors in the order they came."""
    parts = [f'<div class="workbench-ranks">{_STYLE}']
    for rank in sorted(cells):
        cell = cells[rank]
        failed = (cell.failure is not None and not _interrupted(cell)) or bool(cell.stacks)
        opened = " open" if len(cells) <= _COLLAPSE_BEYOND or failed else ""
        marked = ' class="failed"' if failed else ""
        parts.append(
            f"<details{marked}{opened}><summary><b>rank {rank}</b> · {html.escape(_status(cell))}</summary>"
        )
        for kind, item in cell.items:
            parts.append(_html_item(kind, item))
        if cell.failure is not None and not _interrupted(cell):
            parts.append(_pre(cell.failure.traceback, error=True))
        if cell.stacks:
            where = f"rank {rank} was here (most recent call first):\n{_trim_stack(cell.stacks)}"
            parts.append(_pre(where, error=True))
        parts.append("</details>")
    parts.append("</div>")
    return "".join(parts)


def _html_item(kind: str, item: Any) -> str:
    if kind != "display":
        return _pre(item, error=kind == "stderr")
    if "text/html" in item:
        return f"<div>{item['text/html']}</div>"
    if "image/png" in item:
        png = item["image/png"]
        encoded = png if isinstance(png, str) else base64.b64encode(png).decode()
        return f'<img src="data:image/png;base64,{encoded}"/>'
    if "image/svg+xml" in item:
        return f"<div>{item['image/svg+xml']}</div>"
    return _pre(item["text/plain"])


def _pre(text: str, error: bool = False) -> str:
    marked = ' class="error"' if error else ""
    return f"<pre{marked}>{html.escape(text.rstrip(chr(10)))}</pre>"


def _trim_stack(stacks: str) -> str:
    """A faulthandler stack cut after the cell's own frame (the pool's serving frames below it)."""
    lines = [line for line in stacks.splitlines() if not line.startswith(("Current thread", "Thread 0x"))]
    cell = [i for i, line in enumerate(lines) if "<rank cell" in line]
    return "\n".join(lines[: cell[-1] + 1] if cell else lines)


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext workbench``: register ``%ranks`` / ``%%ranks``; the pool stops with the kernel."""
    shell.register_magics(RankMagics(shell))  # the pool's ranks die at interpreter exit (weakref.finalize)
