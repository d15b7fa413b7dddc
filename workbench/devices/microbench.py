"""What this machine actually delivers: memory bandwidth and matmul FLOP/s, on the CPU and the GPU.

    workbench bench hardware               # quick: a few seconds
    workbench bench hardware --full        # larger sizes, closer to peak

- CPU, always: a memory copy (read + write bytes / time) and an fp32 matmul through torch (2·n³ FLOP),
  timed with ``time.perf_counter``.
- GPU, when torch sees CUDA: host→device and device→host copies from pinned and pageable memory (one
  way, so the PCIe link), a device→device copy (read + write: HBM bandwidth), and matmuls in fp32 (TF32
  off), TF32 and bf16, timed with CUDA events. GPU rows say how far they are from the datasheet
  (:mod:`workbench.devices.datasheets`) when the GPU is in it.

Each measurement runs once to warm up, then ``repeats`` times; the median is reported. What cannot be
measured is listed in ``skipped`` with the reason. Measuring the GPU initialises CUDA in this process
(a process with CUDA initialised cannot fork CUDA workers); ``device="cpu"`` leaves it alone.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from workbench._validate import check_choice, check_int
from workbench.devices.datasheets import GpuDatasheet, find_datasheet
from workbench.tables import html_table, text_table

MiB = 2**20

# (copy bytes, matmul n) for quick and full runs.
_CPU_SIZES = {True: (256 * MiB, 1024), False: (1024 * MiB, 2048)}
_GPU_SIZES = {True: (256 * MiB, 4096), False: (1024 * MiB, 8192)}
_GPU_INNER = 5  # calls per CUDA-event sample, so short kernels (a 0.2 ms bf16 matmul) time accurately

_CPU_COPY, _CPU_MATMUL = "CPU memory copy", "CPU matmul fp32"
_GPU_COPIES = (
    "host→device pinned",
    "host→device pageable",
    "device→host pinned",
    "device→host pageable",
    "device→device copy",
)
_GPU_MATMULS = ("GPU matmul fp32", "GPU matmul tf32", "GPU matmul bf16")
_HEADERS = ("measurement", "value", "unit", "detail")


@dataclass(frozen=True)
class Measurement:
    """One measured rate: ``value`` in ``unit`` (GB/s = 10^9 bytes/s; GFLOP/s, TFLOP/s)."""

    name: str
    value: float
    unit: str
    detail: str


@dataclass(frozen=True)
class HardwareBenchmark:
    """Results of :func:`benchmark_hardware`: what was measured, what was skipped and why.

    ``gpu`` is the measured GPU's name (None: no GPU measured); ``seconds`` the whole run's wall time.
    """

    measurements: tuple[Measurement, ...]
    skipped: tuple[tuple[str, str], ...]
    gpu: str | None
    quick: bool
    seconds: float

    def get(self, name: str) -> Measurement:
        """The measurement called ``name``; KeyError (saying why) if it was skipped or does not exist."""
        for measurement in self.measurements:
            if measurement.name == name:
                return measurement
        reasons = dict(self.skipped)
        if name in reasons:
            raise KeyError(f"{name!r} was skipped: {reasons[name]}")
        raise KeyError(f"no measurement {name!r}; measured: {', '.join(self.as_dict())}")

    def as_dict(self) -> dict[str, float]:
        """Measurement name → value (its unit is ``get(name).unit``)."""
        return {m.name: m.value for m in self.measurements}

    def _rows(self) -> list[list[str]]:
        rows = [[m.name, f"{m.value:,.1f}", m.unit, m.detail] for m in self.measurements]
        return rows + [[name, "skipped", "", reason] for name, reason in self.skipped]

    def table(self) -> str:
        """Measurements, then skipped rows with their reasons, as a text table."""
        return text_table(_HEADERS, self._rows())

    def _repr_html_(self) -> str:
        mode = "quick" if self.quick else "full"
        caption = f"Hardware benchmark ({mode}, {self.seconds:.1f} s)"
        return html_table(_HEADERS, self._rows(), caption=caption)


def benchmark_hardware(
    *, repeats: int = 5, quick: bool = True, device: str | None = None
) -> HardwareBenchmark:
    """Measure memory bandwidth and matmul throughput (see the module docstring).

    Args:
        repeats: timed runs of each measurement after one warm-up, ≥ 1; the median is reported.
        quick: small sizes (256 MiB copies, 1024² CPU / 4096² GPU matmuls); False: 1 GiB, 2048² / 8192².
        device: ``"cpu"``: CPU only; ``"cuda"``: CPU and GPU (RuntimeError without one); None: the GPU
            too when torch sees one.

    Raises:
        ValueError: ``repeats`` is not an integer ≥ 1, or ``device`` is not None, "cpu" or "cuda".
        RuntimeError: ``device="cuda"`` on a machine where torch sees no CUDA device.

    >>> result = benchmark_hardware(repeats=1, device="cpu")
    >>> result.get("CPU matmul fp32").unit
    'GFLOP/s'
    """
    check_int("repeats", repeats, minimum=1)
    check_choice("device", device, (None, "cpu", "cuda"))
    started = time.perf_counter()
    measurements, skipped = _cpu_measurements(repeats, quick)
    no_gpu = "device='cpu' was asked for" if device == "cpu" else _no_cuda_reason()
    if no_gpu and device == "cuda":
        raise RuntimeError(f"device='cuda' was asked for, but {no_gpu}; use device=None or 'cpu'")
    gpu = None
    if no_gpu:
        skipped += [(name, no_gpu) for name in (*_GPU_COPIES, *_GPU_MATMULS)]
    else:
        gpu, gpu_measurements, gpu_skipped = _gpu_measurements(repeats, quick)
        measurements += gpu_measurements
        skipped += gpu_skipped
    return HardwareBenchmark(tuple(measurements), tuple(skipped), gpu, quick, time.perf_counter() - started)


def _no_cuda_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    build = f" (CPU-only torch build {torch.__version__})" if torch.version.cuda is None else ""
    return f"no CUDA device: torch.cuda.is_available() is False{build}"


@contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """fp32 matmuls at ``precision`` inside ("highest": IEEE fp32, TF32 off; "high": TF32), then restore.

    Uses torch's one global switch (it sets ``torch.backends.cuda.matmul.allow_tf32`` consistently);
    flipping ``allow_tf32`` alone would lose a "medium" setting on restore.
    """
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def _precision_problem() -> str | None:
    """Why fp32 matmul precision cannot be set and restored here, or None when it can."""
    try:
        torch.get_float32_matmul_precision()
    except RuntimeError as error:  # torch refuses when legacy and per-backend precision flags disagree
        return f"cannot set fp32 matmul precision: {error}"
    return None


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``run`` after one warm-up call (CPU work: torch ops here are synchronous)."""
    run()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _matmul_seconds(
    a: torch.Tensor, b: torch.Tensor, repeats: int, timer: Callable[[Callable[[], object], int], float]
) -> float:
    """Seconds per ``a @ b`` (into a preallocated output) as ``timer`` measures it."""
    out = torch.empty_like(a)  # (n, n)
    return timer(lambda: torch.mm(a, b, out=out), repeats)


def _cpu_copy_seconds(n_bytes: int, repeats: int) -> float:
    source = torch.ones(n_bytes, dtype=torch.uint8)  # written, so its pages exist before timing
    target = torch.empty_like(source)
    return _median_seconds(lambda: target.copy_(source), repeats)


def _cpu_measurements(repeats: int, quick: bool) -> tuple[list[Measurement], list[tuple[str, str]]]:
    n_bytes, n = _CPU_SIZES[quick]
    threads = torch.get_num_threads()
    seconds = _cpu_copy_seconds(n_bytes, repeats)
    measurements = [
        Measurement(
            _CPU_COPY,
            2 * n_bytes / seconds / 1e9,
            "GB/s",
            f"{n_bytes // MiB} MiB copy, read + write, {threads} threads",
        )
    ]
    problem = _precision_problem()
    if problem:
        return measurements, [(_CPU_MATMUL, problem)]
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
    with float32_matmul_precision("highest"):
        seconds = _matmul_seconds(a, b, repeats, _median_seconds)
    flops = 2 * n**3 / seconds
    measurements.append(Measurement(_CPU_MATMUL, flops / 1e9, "GFLOP/s", f"{n}³, {threads} threads"))
    return measurements, []


def cuda_seconds(run: Callable[[], object], repeats: int, inner: int = _GPU_INNER) -> float:
    """Median seconds per call of ``run`` on the current stream, from CUDA events, after a warm-up.

    Each of the `repeats` samples times `inner` calls in a row, so short kernels time accurately.
    """
    return alternating_cuda_seconds({"run": run}, repeats, inner)["run"]


def alternating_cuda_seconds(
    runs: dict[str, Callable[[], object]], repeats: int, inner: int = _GPU_INNER
) -> dict[str, float]:
    """`cuda_seconds` of several variants, their samples taken in turn (a, b, a, b, ...) after a warm-up of
    each, so that a change in the GPU's clocks or in the machine's load touches every variant alike."""
    for run in runs.values():
        for _ in range(inner):
            run()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                run()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / 1e3 / inner)
    return {name: statistics.median(values) for name, values in samples.items()}


def _of_datasheet(value: float, peak: float | None, unit: str, sheet: GpuDatasheet | None) -> str:
    if sheet is None or peak is None:
        return ""
    return f", {100 * value / peak:.0f}% of datasheet {peak:g} {unit} ({sheet.name})"


def _gpu_measurements(repeats: int, quick: bool) -> tuple[str, list[Measurement], list[tuple[str, str]]]:
    device = torch.device("cuda", torch.cuda.current_device())
    name = torch.cuda.get_device_name(device)
    sheet = find_datasheet(name)
    measurements = _gpu_copies(device, repeats, quick, sheet)
    matmuls, skipped = _gpu_matmuls(device, repeats, quick, sheet)
    torch.cuda.empty_cache()  # hand the benchmark's buffers back to the driver
    return name, measurements + matmuls, skipped


def _gpu_copies(
    device: torch.device, repeats: int, quick: bool, sheet: GpuDatasheet | None
) -> list[Measurement]:
    n_bytes = _GPU_SIZES[quick][0]
    pinned = torch.ones(n_bytes, dtype=torch.uint8, pin_memory=True)
    pageable = torch.ones(n_bytes, dtype=torch.uint8)
    on_device = torch.ones(n_bytes, dtype=torch.uint8, device=device)
    other = torch.empty_like(on_device)
    size = f"{n_bytes // MiB} MiB"
    # (name, copy, bytes moved, detail); pageable copies are synchronous: the driver stages them.
    copies = (
        (_GPU_COPIES[0], lambda: on_device.copy_(pinned, non_blocking=True), n_bytes, f"{size}, one way"),
        (_GPU_COPIES[1], lambda: on_device.copy_(pageable), n_bytes, f"{size}, one way"),
        (_GPU_COPIES[2], lambda: pinned.copy_(on_device, non_blocking=True), n_bytes, f"{size}, one way"),
        (_GPU_COPIES[3], lambda: pageable.copy_(on_device), n_bytes, f"{size}, one way"),
        (_GPU_COPIES[4], lambda: other.copy_(on_device), 2 * n_bytes, f"{size}, read + write"),
    )
    measurements = []
    for copy_name, run, moved, detail in copies:
        rate = moved / cuda_seconds(run, repeats) / 1e9
        if copy_name == _GPU_COPIES[4]:
            detail += _of_datasheet(rate, sheet and sheet.memory_bandwidth_gbs, "GB/s", sheet)
        measurements.append(Measurement(copy_name, rate, "GB/s", detail))
    return measurements


def _gpu_matmuls(
    device: torch.device, repeats: int, quick: bool, sheet: GpuDatasheet | None
) -> tuple[list[Measurement], list[tuple[str, str]]]:
    n = _GPU_SIZES[quick][1]
    capability = torch.cuda.get_device_capability(device)
    problem = _precision_problem()
    tf32_problem = problem
    if capability < (8, 0):
        tf32_problem = "TF32 needs compute capability ≥ 8.0, this GPU has {}.{}".format(*capability)
    bf16_problem = None
    if not torch.cuda.is_bf16_supported(including_emulation=False):
        bf16_problem = "this GPU has no bf16 support"
    # (name, dtype, fp32 precision or None, why not measurable, datasheet peak in TFLOP/s)
    plans = (
        (_GPU_MATMULS[0], torch.float32, "highest", problem, sheet and sheet.fp32_tflops),
        (_GPU_MATMULS[1], torch.float32, "high", tf32_problem, sheet and sheet.tf32_tflops),
        (_GPU_MATMULS[2], torch.bfloat16, None, bf16_problem, sheet and sheet.bf16_tflops),
    )
    generator = torch.Generator(device).manual_seed(0)
    measurements, skipped = [], []
    for name, dtype, precision, why_not, peak in plans:
        if why_not:
            skipped.append((name, why_not))
            continue
        a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2))
        if precision is None:
            seconds = _matmul_seconds(a, b, repeats, cuda_seconds)
        else:
            with float32_matmul_precision(precision):
                seconds = _matmul_seconds(a, b, repeats, cuda_seconds)
        tflops = 2 * n**3 / seconds / 1e12
        detail = f"{n}³" + _of_datasheet(tflops, peak, "TFLOPS", sheet)
        measurements.append(Measurement(name, tflops, "TFLOP/s", detail))
    return measurements, skipped
