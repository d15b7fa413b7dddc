"""Host time of one kernel call from torch tensors, against a bare numba launch of prepared numba arrays
(the kernels issue's target: at most 15 µs over it), on this machine's GPU.

    workbench bench kernels --launch

Three ways to launch the same kernel (the sum reduction, on a 4096-float tensor: the GPU finishes each call
long before the host makes the next, so the time is the host's):

- a bare numba launch: ``kernel[grid, block, stream](x, out)`` on numba views made once;
- ours, direct: `as_buffer` of both tensors, then `workbench.kernels._numba.launch`, which skips numba's
  dispatcher (:mod:`workbench.kernels.direct_launch`);
- ours through numba's dispatcher: the same with ``WORKBENCH_KERNEL_LAUNCH=numba``.

Each repeat alternates the variants and times the mean of ``calls`` calls; the table gives medians and
ranges over repeats. Without a CUDA GPU (or with numba on its simulator) nothing runs: ``reason`` says why.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from workbench.tables import text_table

BARE, DIRECT, DISPATCHER = "bare numba launch, numba arrays", "ours, direct", "ours, numba's dispatcher"
TARGET_OVER_BARE_US = 15.0  # the kernels issue: host cost per call at most this far over a bare launch
_ELEMENTS = 4096


@dataclass(frozen=True)
class LaunchCost:
    """Host µs per call by variant: (median, (min, max)) over repeats; ``reason`` when nothing ran."""

    micros: dict[str, tuple[float, tuple[float, float]]]
    gpu: str | None
    reason: str | None

    def over_bare(self, variant: str = DIRECT) -> float:
        """Median µs of `variant` minus the bare launch's."""
        return self.micros[variant][0] - self.micros[BARE][0]

    def table(self) -> str:
        if self.reason is not None:
            return f"launch cost: nothing measured: {self.reason}"
        rows = []
        for variant, (median, (low, high)) in self.micros.items():
            over = "" if variant == BARE else f"{self.over_bare(variant):+.1f}"
            rows.append([variant, f"{median:.1f} [{low:.1f}–{high:.1f}]", over])
        return text_table(["launch", "host µs per call", "µs over the bare launch"], rows)


def alternate(
    stretches: dict[str, Callable[[int], object]], repeats: int, calls: int, settle: Callable[[], object]
) -> dict[str, list[float]]:
    """Per variant, µs per call of a stretch of `calls` calls (``stretches[name](calls)`` makes them), in
    each of `repeats` rounds that alternate the variants; `settle` runs before each stretch (a GPU sync, so
    no stretch waits on another's work).

    Example:
        >>> def stretch(calls):
        ...     for _ in range(calls):
        ...         pass
        >>> samples = alternate({"a": stretch, "b": stretch}, repeats=3, calls=10, settle=lambda: None)
        >>> {name: len(times) for name, times in samples.items()}
        {'a': 3, 'b': 3}
    """
    samples: dict[str, list[float]] = {name: [] for name in stretches}
    for _ in range(repeats):
        for name, stretch in stretches.items():
            settle()
            started = time.perf_counter()
            stretch(calls)
            samples[name].append(1e6 * (time.perf_counter() - started) / calls)
    return samples


def summary(samples: dict[str, list[float]]) -> dict[str, tuple[float, tuple[float, float]]]:
    """Median and (min, max) of each variant's samples."""
    return {name: (statistics.median(s), (min(s), max(s))) for name, s in samples.items()}


@contextmanager
def _launch_path(choice: str) -> Iterator[None]:
    from workbench.kernels.direct_launch import LAUNCH_VARIABLE

    saved = os.environ.get(LAUNCH_VARIABLE)
    os.environ[LAUNCH_VARIABLE] = choice
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(LAUNCH_VARIABLE, None)
        else:
            os.environ[LAUNCH_VARIABLE] = saved


def _stretch(run: Callable[[], object], choice: str | None = None) -> Callable[[int], None]:
    """`calls` calls of `run`, with the launch path `choice` set around them all (not around each)."""

    def calls_of(calls: int) -> None:
        with _launch_path(choice) if choice else nullcontext():
            for _ in range(calls):
                run()

    return calls_of


def benchmark_launch_cost(repeats: int = 7, calls: int = 200) -> LaunchCost:
    """The three launches' host µs per call (see the module's docstring)."""
    from workbench.bench.numba_gpu import no_gpu_reason

    reason = no_gpu_reason()
    if reason is not None:
        return LaunchCost({}, None, reason)
    import torch

    from workbench.kernels._numba import as_buffer, launch, launch_1d, load_cuda
    from workbench.kernels.reduce import LOADS_IN_FLIGHT, _reduce_kernel

    cuda = load_cuda()
    x, out = torch.randn(_ELEMENTS, device="cuda"), torch.zeros(1, device="cuda")
    blocks, threads = launch_1d(_ELEMENTS // LOADS_IN_FLIGHT)
    kernel = _reduce_kernel(threads, False)
    stream = as_buffer(x, "x").stream()
    views = cuda.as_cuda_array(x, sync=False), cuda.as_cuda_array(out, sync=False)

    def ours() -> None:
        x_buffer = as_buffer(x, "x")
        launch(kernel, blocks, threads, x_buffer.stream(), x_buffer, as_buffer(out, "out"))

    with _launch_path("direct"):
        ours()  # compiles; the direct path learns the signature
    stretches = {
        BARE: _stretch(lambda: kernel[blocks, threads, stream.numba](*views)),
        DIRECT: _stretch(ours, "direct"),
        DISPATCHER: _stretch(ours, "numba"),
    }
    for stretch in stretches.values():
        stretch(10)  # warm-up
    samples = alternate(stretches, repeats, calls, settle=torch.cuda.synchronize)
    torch.cuda.synchronize()
    return LaunchCost(summary(samples), torch.cuda.get_device_name(), None)
