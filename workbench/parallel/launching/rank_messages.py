"""The messages between the notebook and the ranks of an interactive pool (`rank_pool`, `rank_server`),
and what the notebook collects from them for one cell (`RankCell`, `CellRun`).

Requests go from the notebook to a rank; replies come back, each naming its rank. Plain frozen
dataclasses, pickled by the pipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class RunCell:
    """Run `code` in the rank's namespace; `number` names the cell in tracebacks."""

    code: str
    number: int


@dataclass(frozen=True)
class Pull:
    """Send back the value of `name` (tensors moved to the CPU)."""

    name: str


@dataclass(frozen=True)
class Push:
    """Bind `name` to the cloudpickled value."""

    name: str
    pickled: bytes


@dataclass(frozen=True)
class Stop:
    """Leave the serving loop (the rank then leaves the process group and exits)."""


# ------------------------------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Ready:
    """The rank joined the process group and serves requests."""

    rank: int
    pid: int
    device: str


@dataclass(frozen=True)
class CellOutput:
    """Text a running cell wrote to ``stdout`` or ``stderr``."""

    rank: int
    stream: str
    text: str


@dataclass(frozen=True)
class CellDisplay:
    """A value a running cell displayed (or its last expression): a Jupyter MIME bundle."""

    rank: int
    bundle: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankFailure:
    """What a cell raised on a rank: the error, and the traceback from the cell's own frames on."""

    error: str
    message: str
    traceback: str

    def line(self) -> str:
        first = self.message.splitlines()[0] if self.message else ""
        return f"{self.error}: {first}" if first else self.error


@dataclass(frozen=True)
class CellDone:
    """The cell ended on this rank, after `seconds`, with `failure` if it raised."""

    rank: int
    seconds: float
    failure: RankFailure | None = None


@dataclass(frozen=True)
class ValueReply:
    """The answer to `Pull` (the pickled value) or `Push` (empty); `problem` says why there is no value."""

    rank: int
    name: str
    pickled: bytes
    problem: str = ""


# ------------------------------------------------------------------------------------------- a cell's run


@dataclass
class RankCell:
    """What one rank did with a cell: its output in order (``("stdout", text)``, ``("stderr", text)`` or
    ``("display", bundle)``), its seconds, and how it ended."""

    rank: int
    items: list[tuple[str, Any]] = field(default_factory=list)
    seconds: float | None = None  # None: it did not finish
    failure: RankFailure | None = None
    stacks: str = ""  # where it was when it timed out or was interrupted without ending

    @property
    def done(self) -> bool:
        return self.seconds is not None

    def record(self, reply: object) -> None:
        """Add `reply` to what `cell` holds."""
        if isinstance(reply, CellOutput):
            if self.items and self.items[-1][0] == reply.stream:  # one item per run of text
                self.items[-1] = (reply.stream, self.items[-1][1] + reply.text)
            else:
                self.items.append((reply.stream, reply.text))
        elif isinstance(reply, CellDisplay):
            self.items.append(("display", reply.bundle))
        elif isinstance(reply, CellDone):
            self.seconds, self.failure = reply.seconds, reply.failure


@dataclass
class CellRun:
    """A cell's run on the pool: each rank's `RankCell`, and whether it was interrupted or timed out."""

    cells: dict[int, RankCell]
    interrupted: bool = False
    timed_out_after: float | None = None  # the --timeout that ran out
    stuck: list[int] = field(default_factory=list)  # ranks that did not end when interrupted

    def text(self, rank: int, stream: str = "stdout") -> str:
        """Everything rank `rank` wrote to `stream`."""
        return "".join(text for kind, text in self.cells[rank].items if kind == stream)

    @property
    def failed(self) -> list[int]:
        """Ranks whose cell raised or did not end."""
        return [rank for rank, cell in self.cells.items() if cell.failure is not None or not cell.done]
