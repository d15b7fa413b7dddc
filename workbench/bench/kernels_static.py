"""What the compiler predicts for each kernel on an A100 (sm_80) and an H100 (sm_90), with no GPU here:
registers, shared memory, occupancy, the FFMA share of the main loop, the work at the benchmark's sizes and
the roofline time it implies. Every figure is a prediction from the compiled code and the datasheet, not a
measurement (``workbench bench kernels`` measures, on a GPU).

    workbench bench kernels --static           # quick sizes (matmul 2048³, 10M parameters)
    workbench bench kernels --static --full    # matmul 4096³, 100M parameters

Model: roofline time = max(FLOPs / FP32 peak, bytes / memory bandwidth) with the datasheet's peaks and each
kernel's minimum traffic; memory-bound kernels are predicted at their roofline (a ceiling). The matmuls,
compute-bound at these sizes, are predicted from their main loop's instructions (`matmul_bound`): per SM and
cycle, the 4 schedulers issue 4 warp instructions, of which a register-tiled matmul with 8 warps per SM
keeps 2.69 busy (Nsight Compute on the H100, 2026-11-26: it issued in 65% of the cycles; cuBLAS in 87%),
the FP32 units take 4 warp FFMAs on sm_90 (128 lanes) and 2 on sm_80 (64), and shared memory serves one
128-byte wavefront (a warp's 32-bit load; 64-bit: 2, 128-bit: 4 at most). The slowest of the three sets the
time; the fraction of FP32 peak is the FFMA time over it. With ``--full`` the H100 rows add the time
`workbench gpu-check` measured on an H100 (the report that comes with workbench) and measured / predicted.
Before this model, the prediction was the FFMA share alone (all 4 slots issuing): the register matmul took
1.6× that time, the tiled one 4×.
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


@dataclass(frozen=True)
class SmModel:
    """What one SM does per cycle: warp instructions issued, warp FFMAs (FP32 lanes / 32), shared-memory
    wavefronts (128 bytes)."""

    ffma: float
    issue: float = 4.0
    shared_wavefronts: float = 1.0


SM_MODELS = {"sm_80": SmModel(ffma=2.0), "sm_90": SmModel(ffma=4.0)}
# Issue slots a register-tiled matmul at one block of 8 warps per SM keeps busy: IPC 2.69 of 4, Nsight Compute
# on the H100 at 4096³ (2026-11-26, docs/gpu/raw/2026-11-26-4-ncu.csv)
ISSUED_PER_CYCLE = 2.69


def matmul_bound(main_loop: dict[str, int], arch: str) -> tuple[float, str]:
    """(predicted fraction of FP32 peak, what bounds it) of a compute-bound kernel from its main loop's
    instructions (``KernelReport.main_loop``): the FFMAs' cycles over the slowest of issue, FFMA and
    shared-memory cycles (see the module docstring); (0.0, "-") without FFMA.

    Example:
        >>> register = {"FFMA": 512, "LDS.32": 128, "IMAD": 300, "IADD3": 5}  # 945 instructions
        >>> fraction, bound = matmul_bound(register, "sm_90")
        >>> round(fraction, 2), bound
        (0.36, 'issue')
        >>> matmul_bound({"FFMA": 16, "LDS.32": 32, "IADD3": 8}, "sm_90")  # two loads per FFMA
        (0.125, 'shared memory')
    """
    ffma = main_loop.get("FFMA", 0)
    if not ffma:
        return 0.0, "-"
    model = SM_MODELS[arch]
    wavefronts = sum(
        count * max(1, int(opcode.split(".")[1]) // 32)
        for opcode, count in main_loop.items()
        if opcode.startswith("LDS.")
    )
    cycles = {
        "issue": sum(main_loop.values()) / min(ISSUED_PER_CYCLE, model.issue),
        "FFMA": ffma / model.ffma,
        "shared memory": wavefronts / model.shared_wavefronts,
    }
    bound = max(cycles, key=cycles.__getitem__)
    return cycles["FFMA"] / cycles[bound], bound


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
        """The roofline time, over the predicted fraction of peak for a compute-bound matmul."""
        share = self.predicted_of_peak
        return self.roofline_s / share if share else self.roofline_s

    @property
    def prediction(self) -> tuple[float, str] | None:
        """(fraction of FP32 peak, what bounds it) for a compute-bound matmul (`matmul_bound`); None
        otherwise."""
        if self.compute_bound and self.report["name"].startswith("matmul"):
            return matmul_bound(self.report["main_loop"], self.report["arch"])
        return None

    @property
    def predicted_of_peak(self) -> float | None:
        """The fraction of FP32 peak of `prediction`; None where there is none."""
        prediction = self.prediction
        return None if prediction is None else prediction[0]

    def cells(self) -> list[str]:
        r, prediction = self.report, self.prediction
        return [
            r["name"], self.gpu.name, str(r["registers"]), str(r["shared_bytes"]), f"{r['occupancy']:.0%}",
            f"{r['ffma_share']:.0%}" if r["ffma_share"] else "-", self.size, f"{self.flops / 1e9:.3g}",
            f"{self.bytes / 1e6:,.0f}", f"{1e3 * self.roofline_s:.3g}",
            "compute" if self.compute_bound else "memory",
            "-" if prediction is None else f"{prediction[0]:.0%} ({prediction[1]})",
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
