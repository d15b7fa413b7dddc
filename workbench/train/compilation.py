"""torch.compile for the training loop: `TrainConfig(compile=...)` compiles the module the steps run, and a
`CompileWatch` reports what compiling cost apart from the steps.

    config = TrainConfig(compile="default")     # or "max-autotune-no-cudagraphs", "reduce-overhead"
    trainer = Trainer(model, loss_fn, data, config)
    trainer.fit()
    trainer.compile_report     # {'seconds': 9.8, 'graphs': 1, 'graph_breaks': 0, 'break_reasons': [], ...}

What is compiled: the module the training steps call (under `DataParallel`, the DDP wrapper, so TorchDynamo
splits its graph at the gradient buckets and the all-reduce still overlaps backward). Evaluation, checkpoints
and the memory probe use the module itself (eager): its state dict keeps its names. The optimizer step stays
eager (a learning rate that changes every step would recompile it).

Compiling happens inside the first steps (TorchDynamo traces the forward at the first call, Inductor builds
the backward at the first backward, and a new input shape compiles again). The watch counts those seconds
through TorchDynamo's compile callbacks; the loop takes them out of ``samples_per_s`` and out of the step's
``step_time`` phases (reported as its ``compiling``), and sends the totals as each logged step's
``compile`` field, so throughput shows the steady state and the compile cost is read apart.

Inductor builds C++ (CPU) or Triton (GPU) kernels with a C compiler: without one the Trainer refuses at
construction with the fix instead of failing inside the first step.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from typing import Any

import torch

MAX_REASONS = 5  # graph-break reasons kept in a report (the most frequent)


def c_compiler(device: torch.device) -> str | None:
    """The C/C++ compiler Inductor would build kernels with for `device`, as a path, or None if missing.

    CPU kernels are C++ (``$CXX``, else ``g++``, as Inductor's ``cpp.cxx``); GPU kernels are Triton's, whose
    launcher is C (``$CC``, else ``cc``/``gcc``).

    Example:
        >>> c_compiler(torch.device("cpu")) is None or os.path.isabs(c_compiler(torch.device("cpu")))
        True
    """
    if device.type == "cuda":
        names = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    else:
        names = [os.environ.get("CXX") or "g++"]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


class CompilerMissingError(RuntimeError):
    """``compile`` was asked for on a machine without the compiler TorchInductor needs (the fix is said)."""


def check_can_compile(mode: str, device: torch.device) -> None:
    """Raise RuntimeError (with the fix) when `mode` needs a C compiler this machine lacks."""
    if mode == "off" or c_compiler(device) is not None:
        return
    if device.type == "cuda":
        wanted = (
            f"a C compiler (CC={os.environ['CC']!r})" if os.environ.get("CC") else "a C compiler (cc/gcc)"
        )
    else:
        wanted = (
            f"the C++ compiler CXX={os.environ['CXX']!r}" if os.environ.get("CXX") else "a C++ compiler (g++)"
        )
    raise CompilerMissingError(
        f"compile={mode!r} needs {wanted} for TorchInductor to build {device.type} kernels, and none is on "
        "PATH; install one (Debian/Ubuntu: apt install g++; conda: conda install gxx) or point CXX/CC at it, "
        "or train eagerly with compile='off'"
    )


def compile_module(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    """`module` compiled with torch.compile in `mode` (``"default"`` is torch's default; ``"off"``: `module`
    itself); it shares the module's parameters, and ``module`` itself stays eager."""
    if mode == "off":
        return module
    return torch.compile(module, mode=None if mode == "default" else mode, dynamic=False)


def uncompiled(module: torch.nn.Module) -> torch.nn.Module:
    """The module behind a torch.compile wrapper (the module itself when it is not one).

    Example:
        >>> layer = torch.nn.Linear(2, 2)
        >>> uncompiled(layer) is layer
        True
    """
    return getattr(module, "_orig_mod", module) if type(module).__name__ == "OptimizedModule" else module


class CompileWatch:
    """Seconds TorchDynamo and Inductor spend compiling while the watch is open, and the graphs and graph
    breaks they produce (from ``torch._dynamo``'s counters, as differences from when it opened).

    Use as a context manager around the fit; `take` gives the compile seconds since its last call.

    Example:
        >>> model = torch.nn.Linear(4, 1)
        >>> with CompileWatch() as watch:
        ...     _ = compile_module(model, "default")(torch.randn(3, 4))
        >>> watch.report()["graphs"], watch.report()["graph_breaks"], watch.take()["forward"] > 0
        (1, 0, True)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: float | None = None
        self.seconds = 0.0
        self._fresh = {"forward": 0.0, "backward": 0.0}  # compile seconds not yet taken, by the pass
        self.compiles = 0
        self._graphs_before = 0
        self._breaks_before: Counter[str] = Counter()
        self._open = False

    def __enter__(self) -> CompileWatch:
        from torch._dynamo.callback import callback_handler
        from torch._dynamo.utils import counters

        self._graphs_before = counters["stats"]["unique_graphs"]
        self._breaks_before = Counter(counters["graph_break"])
        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        from torch._dynamo.callback import callback_handler

        if self._open:
            callback_handler.remove_start_callback(self._start)
            callback_handler.remove_end_callback(self._end)
            self._open = False

    def _start(self, args: Any) -> None:
        with self._lock:
            self._started = time.perf_counter()

    def _end(self, args: Any) -> None:
        with self._lock:
            if self._started is not None:
                elapsed = time.perf_counter() - self._started
                backward = "BACKWARD" in str(getattr(args, "callback_trigger", ""))
                self._fresh["backward" if backward else "forward"] += elapsed
                self.seconds += elapsed
                self.compiles += 1
                self._started = None

    def take(self) -> dict[str, float]:
        """Compile seconds since the previous `take` (or since the watch opened), by the pass that
        compiled: ``{"forward": s, "backward": s}`` (Inductor builds the backward at the first backward)."""
        with self._lock:
            fresh, self._fresh = self._fresh, {"forward": 0.0, "backward": 0.0}
        return fresh

    def report(self) -> dict[str, Any]:
        """``seconds`` compiling, ``compiles`` (each a forward graph, a lazily built backward or a
        recompile), ``graphs`` captured, ``graph_breaks`` and the most frequent ``break_reasons``."""
        from torch._dynamo.utils import counters

        breaks = Counter(counters["graph_break"])
        breaks.subtract(self._breaks_before)
        breaks = +breaks  # drop the reasons that did not occur while open
        return {
            "seconds": round(self.seconds, 4),
            "compiles": self.compiles,
            "graphs": counters["stats"]["unique_graphs"] - self._graphs_before,
            "graph_breaks": sum(breaks.values()),
            "break_reasons": [reason for reason, _ in breaks.most_common(MAX_REASONS)],
        }


def refuse_compile(mode: str, strategy: str, why: str) -> None:
    """Raise ValueError when `mode` asks to compile under a `strategy` whose steps cannot run compiled.

    Example:
        >>> refuse_compile("off", "PipelineParallel", "its stages run inside torch's schedule")
        >>> refuse_compile("default", "PipelineParallel", "its stages run inside torch's schedule")
        Traceback (most recent call last):
        ...
        ValueError: compile='default' is not supported with PipelineParallel (its stages run inside ...
    """
    if mode != "off":
        raise ValueError(
            f"compile={mode!r} is not supported with {strategy} ({why}); use compile='off' with it "
            "(compile works on one device and with DataParallel)"
        )


def describe_compile(report: dict[str, Any]) -> str:
    """One line for a `CompileWatch` report.

    Example:
        >>> describe_compile({"seconds": 7.52, "compiles": 2, "graphs": 2, "graph_breaks": 1,
        ...                   "break_reasons": ["Call to `torch._dynamo.graph_break()`"]})
        'compiled in 7.5 s: 2 graphs, 1 graph break (Call to `torch._dynamo.graph_break()`)'

    A fit whose graphs this process compiled before (the same shapes, another model instance) compiles
    nothing: TorchDynamo guards on the parameters' shapes, not on which module holds them.
    """
    if not report["compiles"]:
        return "nothing compiled: graphs compiled earlier in this process were reused"
    breaks = report["graph_breaks"]
    line = f"compiled in {report['seconds']:.1f} s: {report['graphs']} graph{'s' * (report['graphs'] != 1)}, "
    line += f"{breaks} graph break{'s' * (breaks != 1)}"
    if report["break_reasons"]:
        line += f" ({'; '.join(report['break_reasons'])})"
    return line
