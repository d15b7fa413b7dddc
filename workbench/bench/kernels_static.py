"""What the compiler predicts for each kernel on an A100 (sm_80) and an H100 (sm_90), with no GPU here:
registers, shared memory, occupancy, the FFMA share of the main loop, the work at the benchmark's sizes and
the roofline time it implies. Every figure is a prediction from the compiled code and the datasheet, not a
measurement (``workbench bench kernels`` measures, on a GPU).

    workbench bench kernels --static           # quick sizes (matmul 2048³, 10M parameters)
    workbench bench kernels --static --full    # matmul 4096³, 100M parameters

Model: roofline time = max(FLOPs / FP32 peak, bytes / memory bandwidth) with the datasheet's peaks and each
kernel's minimum traffic. For the matmul kernels, which are compute-bound at these sizes, the predicted
fraction of FP32 peak is the FFMA share of the main loop: an issue-slot model (each of an SM's 4 schedulers
issues one warp instruction a cycle, and the FP32 units take one FFMA each), so the time is the roofline's
over that share, with every slot used; memory-bound kernels are predicted at their roofline. Both are
ceilings. With ``--full`` the H100 rows add the time `workbench gpu-check` measured on an H100 (the report
that comes with workbench) and measured / predicted: on 2026-11-26 the register matmul took 1.6× its
issue-slot time, and Nsight Compute saw why: its schedulers issued in 65% of the cycles, with one block of
8 warps per SM (216 registers a thread) too few to hide the shared-memory and FFMA latencies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workbench.bench.gpu_report import stored_report
from workbench.bench.kernel_sizes import MILLION, SIZES
from workbench.devices.datasheets import DATASHEETS, GpuDatasheet
from workbench.kernels.static import static_reports
from workbench.tables import html_table, text_table

GPUS = {"sm_80": DATASHEETS["A100 SXM 80GB"], "sm_90": DATASHEETS["H100 SXM"]}
HEADERS = (
    "kernel", "GPU", "regs", "smem B", "occupancy", "FFMA share", "size", "GFLOP", "MB",
    "roofline ms (predicted)", "bound", "of FP32 peak (predicted)",
)  # fmt: skip
MEASURED_HEADERS = ("measured ms (H100)", "measured / predicted")
# kernel → the gpu-check row that measured it at the full sizes (same FLOPs and bytes as `kernel_work`)
MEASURED_ROWS = {
    "matmul naive": "matmul naive 4096³", "matmul tiled": "matmul tiled 4096³",
    "matmul register": "matmul register 4096³", "matmul vector": "matmul vector 4096³",
    "sum": "sum 100M", "squared norm": "squared_norm 100M",
    "sgd": "SGD momentum 100M params", "adam": "Adam 100M params",
}  # fmt: skip


def kernel_work(name: str, quick: bool) -> tuple[str, float, float]:
    """(size, FLOPs, minimum bytes moved) of one call of kernel `name` at the benchmark's sizes.

    Example:
        >>> kernel_work("matmul register", quick=True)
        ('2048³', 17179869184, 50331648)
    """
    sizes = SIZES[quick]
    if name.startswith("matmul"):
        n = sizes["matmul"]
        return f"{n}³", 2 * n**3, 3 * n * n * 4
    if name in ("sum", "squared norm"):
        n = sizes["vector"]
        return f"{n // MILLION}M", (2 if name == "squared norm" else 1) * n, 4 * n
    n = sizes["params"]
    per_element = {"clip scale": (1, 8), "clip value": (2, 8), "sgd": (5, 20), "adam": (15, 28)}
    if name in per_element:
        flops, moved = per_element[name]
        return f"{n // MILLION}M", flops * n, moved * n
    rows, classes = sizes["xent"]
    if name.startswith("xent forward"):  # max, exp-sum, log: ~4 per logit; logits read once at least
        return f"{rows}×{classes}", 4 * rows * classes, 4 * rows * classes
    return f"{rows}×{classes}", 3 * rows * classes, 8 * rows * classes  # backward: read logits, write grads


@dataclass(frozen=True)
class StaticRow:
    """One kernel on one GPU: what ptxas made of it and what the roofline predicts."""

    report: dict[str, Any]
    gpu: GpuDatasheet
    size: str
    flops: float
    bytes: float

    @property
    def compute_s(self) -> float:
        return self.flops / (self.gpu.fp32_tflops * 1e12)

    @property
    def memory_s(self) -> float:
        return self.bytes / (self.gpu.memory_bandwidth_gbs * 1e9)

    @property
    def roofline_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s

    @property
    def predicted_s(self) -> float:
        """The roofline time, over the FFMA share for a compute-bound matmul (issue slots)."""
        share = self.predicted_of_peak
        return self.roofline_s / share if share else self.roofline_s

    @property
    def predicted_of_peak(self) -> float | None:
        """Fraction of FP32 peak for a compute-bound matmul (the FFMA share); None otherwise."""
        if self.compute_bound and self.report["name"].startswith("matmul"):
            return self.report["ffma_share"]
        return None

    def cells(self) -> list[str]:
        r, share = self.report, self.predicted_of_peak
        return [
            r["name"], self.gpu.name, str(r["registers"]), str(r["shared_bytes"]), f"{r['occupancy']:.0%}",
            f"{r['ffma_share']:.0%}" if r["ffma_share"] else "-", self.size, f"{self.flops / 1e9:.3g}",
            f"{self.bytes / 1e6:,.0f}", f"{1e3 * self.roofline_s:.3g}",
            "compute" if self.compute_bound else "memory",
            "-" if share is None else f"{share:.0%}",
        ]  # fmt: skip


def measured_seconds(row: StaticRow, measured: Any) -> float | None:
    """What the GPU report `measured` (a `GpuReport`) timed for `row`'s kernel on an H100 at the full sizes,
    from the rate it printed ("23,331 GFLOP/s", "2,213 GB/s"), or None where it has no such row.

    Example:
        >>> from workbench.bench.gpu_report import Check, GpuReport
        >>> timed = Check("sum 100M", 0.4, "× torch", "", "", None, "1,000 GB/s, 33% of peak")
        >>> report = GpuReport({}, [timed], [], 0.0)
        >>> row = StaticRow({"name": "sum", "ffma_share": 0}, GPUS["sm_90"], "100M", 1e8, 4e8)
        >>> round(measured_seconds(row, report) * 1e3, 3)  # 400 MB at 1,000 GB/s
        0.4
    """
    name = MEASURED_ROWS.get(row.report["name"])
    if name is None or row.gpu is not GPUS["sm_90"]:
        return None
    check = next((check for check in measured.checks if check.name == name), None)
    found = None if check is None else re.match(r"([\d,.]+) (GFLOP/s|GB/s)", check.detail)
    if found is None:
        return None
    rate = float(found.group(1).replace(",", "")) * 1e9
    return (row.flops if found.group(2) == "GFLOP/s" else row.bytes) / rate


@dataclass(frozen=True)
class StaticPrediction:
    """The table of `static_prediction` (with ``quick=False``: the H100's measured times beside)."""

    rows: tuple[StaticRow, ...]
    quick: bool
    measured: Any = None  # the stored GPU report, for the full sizes

    def _headers(self) -> tuple[str, ...]:
        return HEADERS if self.measured is None else HEADERS + MEASURED_HEADERS

    def _cells(self) -> list[list[str]]:
        if self.measured is None:
            return [row.cells() for row in self.rows]
        cells = []
        for row in self.rows:
            seconds = measured_seconds(row, self.measured)
            extra = (
                ["-", "-"]
                if seconds is None
                else [f"{1e3 * seconds:.3g}", f"{seconds / row.predicted_s:.2f}"]
            )
            cells.append(row.cells() + extra)
        return cells

    def table(self) -> str:
        table = text_table(self._headers(), self._cells())
        if self.measured is not None:
            env = self.measured.environment
            table += f"\nmeasured: {env.get('gpu')}, {env.get('date')} (workbench gpu-check, docs/gpu/)"
        return table

    def _repr_html_(self) -> str:
        caption = "Predicted from the compiled kernels and the datasheets (no GPU ran them)"
        return html_table(self._headers(), self._cells(), caption=caption)

    def __repr__(self) -> str:
        return self.table()


def static_prediction(quick: bool = True, kernels: tuple[str, ...] = ()) -> StaticPrediction:
    """Compile every kernel (or those named) for sm_80 and sm_90 and predict its time at the bench sizes.

    Needs NVIDIA's toolchain (the ``toolchain`` extra), not a GPU. A few seconds per kernel (the register
    matmul, ~15 s).

    Example:
        >>> prediction = static_prediction(kernels=("matmul register",))  # doctest: +SKIP
        >>> print(prediction.table())  # doctest: +SKIP
    """
    rows = []
    for report in static_reports(tuple(GPUS), kernels):
        size, flops, moved = kernel_work(report["name"], quick)
        rows.append(StaticRow(report, GPUS[report["arch"]], size, flops, moved))
    return StaticPrediction(tuple(rows), quick, None if quick else stored_report())
