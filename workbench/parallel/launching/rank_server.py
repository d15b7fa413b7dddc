"""The rank side of an interactive pool (`rank_pool.RankPool`): a loop that runs notebook cells.

Each rank process starts as a `launch` worker does (fork server, the launcher's cwd, environment and import
path, the process group joined, a `DataParallel` bound to it), then, instead of one function, serves
requests from the notebook until it is told to stop: run a cell's code in this rank's own namespace
(stdout, stderr and displays sent back as they come), hand over a value, take one. Messages are the typed
tuples of `rank_pool` (`Request` in, `Reply` out).

While a cell runs, SIGINT raises KeyboardInterrupt in it (the notebook's stop button); between cells the
rank ignores it, as a `launch` worker does.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from workbench.data.batch import map_tensors
from workbench.parallel.launching.rank_messages import (
    CellDisplay,
    CellDone,
    CellOutput,
    Pull,
    Push,
    RankFailure,
    Ready,
    RunCell,
    Stop,
    ValueReply,
)
from workbench.parallel.strategies.distributed import DistributedStrategy


def serve_cells(strategy: DistributedStrategy, connection: Connection) -> int:
    """Run the notebook's requests on this rank until `Stop` (a `launch` worker's function); returns the
    number of cells run."""
    send = _Sender(connection)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "strategy": strategy,
        "rank": strategy.rank,
        "world_size": strategy.world_size,
        "device": strategy.device,
        "torch": torch,
        "dist": dist,
        "display": lambda *values: [send(CellDisplay(strategy.rank, mime_bundle(v))) for v in values],
    }
    send(Ready(strategy.rank, os.getpid(), str(strategy.device)))
    cells = 0
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):  # the notebook is gone
            return cells
        if isinstance(request, Stop):
            return cells
        if isinstance(request, RunCell):
            cells += 1
            send(run_cell(request, namespace, strategy.rank, send))
        elif isinstance(request, Pull):
            send(_pull(request, namespace, strategy.rank))
        elif isinstance(request, Push):
            namespace[request.name] = cloudpickle.loads(request.pickled)
            send(ValueReply(strategy.rank, request.name, b""))


class _Sender:
    """Sends replies on the connection from any thread (a cell's threads may print)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.lock = threading.Lock()

    def __call__(self, reply: object) -> None:
        with self.lock:
            self.connection.send(reply)


class _RankStream:
    """A cell's sys.stdout or sys.stderr: each write goes to the notebook as a `CellOutput`."""

    def __init__(self, rank: int, name: str, send: _Sender) -> None:
        self.rank, self.name, self.send = rank, name, send

    def write(self, text: str) -> int:
        if text:
            self.send(CellOutput(self.rank, self.name, text))
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: every write was sent."""

    def isatty(self) -> bool:
        return False


def run_cell(
    request: RunCell, namespace: dict[str, Any], rank: int, send: Callable[[object], None]
) -> CellDone:
    """Execute the cell's code in `namespace`; the last expression's value is displayed, as in Jupyter."""
    filename = f"<rank cell {request.number}>"
    linecache.cache[filename] = (len(request.code), None, request.code.splitlines(True), filename)
    started = time.perf_counter()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RankStream(rank, "stdout", send), _RankStream(rank, "stderr", send)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        tree = ast.parse(request.code, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
            if value is not None:
                send(CellDisplay(rank, mime_bundle(value)))
        failure = None
    except BaseException as error:  # the cell's own error, reported with this rank's number
        failure = RankFailure(type(error).__name__, str(error), _user_traceback(error, filename))
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.stdout.flush()
        sys.stdout, sys.stderr = saved
    return CellDone(rank, time.perf_counter() - started, failure)


def _user_traceback(error: BaseException, filename: str) -> str:
    """The traceback from the cell's first frame on, without the frames of this server (user code only:
    frames in libraries the cell called are kept, as IPython keeps them)."""
    frames = traceback.extract_tb(error.__traceback__)
    first = next((i for i, frame in enumerate(frames) if frame.filename == filename), len(frames))
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[first:])]
    return "".join(lines + traceback.format_exception_only(type(error), error))


def mime_bundle(value: Any) -> dict[str, Any]:
    """What Jupyter would show for `value`: its text, and HTML, PNG, SVG or Markdown where it has them
    (plotly figures and pandas frames give HTML; matplotlib figures a PNG)."""
    bundle: dict[str, Any] = {"text/plain": repr(value)}
    if hasattr(value, "savefig"):  # a matplotlib figure
        import io

        buffer = io.BytesIO()
        value.savefig(buffer, format="png", bbox_inches="tight")
        bundle["image/png"] = buffer.getvalue()
    for method, mime in (
        ("_repr_html_", "text/html"),
        ("_repr_png_", "image/png"),
        ("_repr_svg_", "image/svg+xml"),
        ("_repr_markdown_", "text/markdown"),
    ):
        try:
            shown = getattr(value, method)() if hasattr(value, method) else None
        except Exception:  # a broken repr must not lose the cell's other output
            shown = None
        if shown is not None:
            bundle[mime] = shown
    if "text/html" not in bundle and hasattr(value, "to_html") and hasattr(value, "data"):  # plotly figures
        with contextlib.suppress(Exception):
            bundle["text/html"] = value.to_html(include_plotlyjs="cdn", full_html=False)
    return bundle


def on_cpu(value: Any) -> Any:
    """`value` with every tensor in it (also in lists, tuples, named tuples and mappings: `map_tensors`)
    detached and on the CPU; a module on a GPU as a CPU copy."""
    if isinstance(value, torch.nn.Module) and any(p.device.type != "cpu" for p in value.parameters()):
        import copy

        return copy.deepcopy(value).cpu()
    return map_tensors(value, lambda tensor: tensor.detach().cpu())


def _pull(request: Pull, namespace: dict[str, Any], rank: int) -> ValueReply:
    if request.name not in namespace:
        defined = sorted(k for k in namespace if not k.startswith("_"))
        return ValueReply(
            rank,
            request.name,
            b"",
            f"rank {rank} has no variable {request.name!r}; it has: {', '.join(defined)}",
        )
    try:
        return ValueReply(rank, request.name, cloudpickle.dumps(on_cpu(namespace[request.name])))
    except Exception as error:
        return ValueReply(
            rank, request.name, b"", f"{request.name!r} on rank {rank} cannot be pickled: {error}"
        )
