"""The messages between the notebook and the ranks of an interactive pool (`rank_pool`, `rank_server`).

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
