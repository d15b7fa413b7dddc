"""The numba kernels of `workbench.kernels` against their torch counterparts, on this machine's GPU.

    workbench bench kernels             # quick sizes: matmul 2048³, 10M-parameter Adam and clipping
    workbench bench kernels --full      # matmul 4096³ (and 1024³, 8192×1024×8192), 100M-parameter Adam
    workbench bench kernels --static    # no GPU: what the compiler predicts (bench.kernels_static)
    workbench bench kernels --launch    # host µs of one kernel call from torch tensors (bench.launch_cost)

Each kernel and its torch counterpart run on the same data: warm-up, then ``repeats`` samples timed with
CUDA events (several calls each), the median reported as GFLOP/s (matmul) or GB/s (the rest: the bytes each
call must move at least), with our/torch ratio and the fraction of this device's measured peak: a large
device-to-device copy for bandwidth and a large cuBLAS fp32 matmul (TF32 off) for FLOP/s, both from
:func:`workbench.devices.microbench.benchmark_hardware`.

Counterparts: ``torch.mm`` in IEEE fp32 (TF32 off, the previous setting restored after); ``torch.sum`` and
``torch.linalg.vector_norm`` (read back with ``.item()``, as our reductions return a Python float);
``torch.optim.SGD``/``Adam``/``AdamW`` with ``fused=True`` (one flat tensor; Adam also on a model's
200 tensors); ``clip_grad_norm_(foreach=True)`` (read back likewise);
``F.cross_entropy``.

Without a CUDA GPU (or with numba on its CPU simulator) nothing is run: the result's table says why.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional

from workbench._validate import check_int
from workbench.bench.kernel_sizes import MATMUL_SHAPES, MILLION, SIZES, WIDE_XENT
from workbench.bench.numba_gpu import no_gpu_reason
from workbench.devices.microbench import (
    alternating_cuda_seconds,
    benchmark_hardware,
    float32_matmul_precision,
)
from workbench.tables import html_table, text_table

_CLIP_TENSORS = 10  # clipping runs over this many equal gradient tensors
_MODEL_TENSORS = 200  # the optimizers' model case: its parameters in this many tensors (weights and biases)
_INNER = 3  # calls per CUDA-event sample
_HEADERS = ("kernel", "size", "ours", "torch", "unit", "ours/torch", "of peak", "torch counterpart")


@dataclass(frozen=True)
class KernelRow:
    """One kernel against its torch counterpart: median seconds per call, and the work one call does."""

    name: str
    size: str
    counterpart: str
    ours_s: float
    torch_s: float
    flops: float
    bytes: float
    unit: str  # "GFLOP/s" (compute-bound: rate = flops/s) or "GB/s" (memory-bound: bytes/s)
    peak: float | None = None  # the device's measured peak in `unit`

    def _work(self) -> float:
        return self.flops if self.unit == "GFLOP/s" else self.bytes

    @property
    def ours(self) -> float:
        """Our rate in `unit`."""
        return self._work() / self.ours_s / 1e9

    @property
    def torch(self) -> float:
        """torch's rate in `unit`."""
        return self._work() / self.torch_s / 1e9

    @property
    def ratio(self) -> float:
        """Our rate / torch's (1.0: as fast; 0.5: half as fast)."""
        return self.torch_s / self.ours_s

    @property
    def of_peak(self) -> float | None:
        """Our rate as a fraction of the device's measured peak, if known."""
        return None if not self.peak else self.ours / self.peak

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOP per byte moved (the x axis of a roofline)."""
        return self.flops / self.bytes

    def cells(self) -> list[str]:
        share = "" if self.of_peak is None else f"{100 * self.of_peak:.0f}%"
        return [
            self.name,
            self.size,
            _rate(self.ours),
            _rate(self.torch),
            self.unit,
            f"{self.ratio:.2f}",
            share,
            self.counterpart,
        ]


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _count(n: int) -> str:
    return f"{n / MILLION:g}M" if n >= MILLION else f"{n:,}"


NO_GPU_OPTIONS = (
    "without a GPU: --static compiles the kernels for the A100 and H100 and predicts their times; --host "
    "times an optimizer step's host side; notebook 01 shows what was measured on an H100 and an H200"
)


@dataclass(frozen=True)
class KernelBenchmark:
    """Results of :func:`benchmark_kernels`; ``reason`` says why nothing ran (no CUDA GPU), else None."""

    rows: tuple[KernelRow, ...]
    gpu: str | None
    reason: str | None
    peak_gbs: float | None
    peak_gflops: float | None
    quick: bool
    seconds: float

    def table(self) -> str:
        """The rows as a text table, or the reason nothing was measured."""
        if self.reason is not None:
            return f"no CUDA GPU: {self.reason}"
        return text_table(_HEADERS, [row.cells() for row in self.rows]) + "\n" + self._peaks()

    def _peaks(self) -> str:
        gbs = "not measured" if self.peak_gbs is None else f"{self.peak_gbs:,.0f} GB/s"
        gflops = "not measured" if self.peak_gflops is None else f"{self.peak_gflops:,.0f} GFLOP/s"
        return f"device peaks (measured): copy {gbs}, fp32 matmul {gflops}"

    def _repr_html_(self) -> str:
        mode = "quick" if self.quick else "full"
        if self.reason is not None:
            return html_table(("result",), [[self.table()]], caption=f"Kernel benchmark ({mode})")
        caption = f"Kernel benchmark on {self.gpu} ({mode}, {self.seconds:.1f} s); {self._peaks()}"
        return html_table(_HEADERS, [row.cells() for row in self.rows], caption=caption)


def benchmark_kernels(quick: bool = True, repeats: int = 5) -> KernelBenchmark:
    """Time every kernel against its torch counterpart on the GPU (see the module docstring).

    Args:
        quick: matmul 2048³ and 10M-parameter optimizers/clipping; False: 4096³ and 100M.
        repeats: timed samples per measurement after a warm-up, ≥ 1; the median is reported.

    Raises:
        ValueError: `repeats` is not an integer ≥ 1.

    Example:
        >>> result = benchmark_kernels(repeats=1)  # doctest: +SKIP
        >>> print(result.table())  # doctest: +SKIP
        kernel           size   ours    torch   unit     ours/torch  of peak  torch counterpart
        ...
    """
    check_int("repeats", repeats, minimum=1)
    started = time.perf_counter()
    reason = no_gpu_reason()
    if reason is not None:
        return KernelBenchmark((), None, reason, None, None, quick, time.perf_counter() - started)

    hardware = benchmark_hardware(repeats=repeats, quick=quick, device="cuda")
    peak_gbs = hardware.as_dict().get("device→device copy")
    peak_tflops = hardware.as_dict().get("GPU matmul fp32")
    peak_gflops = None if peak_tflops is None else peak_tflops * 1e3
    rows = tuple(_gpu_rows(quick, repeats, peak_gbs, peak_gflops))
    torch.cuda.empty_cache()
    seconds = time.perf_counter() - started
    return KernelBenchmark(rows, torch.cuda.get_device_name(), None, peak_gbs, peak_gflops, quick, seconds)


Measure = Callable[..., KernelRow]  # measure(name, size, counterpart, ours, theirs, flops, bytes, unit)


def _gpu_rows(
    quick: bool, repeats: int, peak_gbs: float | None, peak_gflops: float | None
) -> Iterator[KernelRow]:
    """Each group builds its tensors, measures, and frees them before the next (100M parameters are big)."""
    sizes = SIZES[quick]
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device).manual_seed(0)

    def measure(name, size, counterpart, ours, theirs, flops, moved, unit) -> KernelRow:
        peak = peak_gflops if unit == "GFLOP/s" else peak_gbs
        seconds = alternating_cuda_seconds({"ours": ours, "torch": theirs}, repeats, _INNER)
        ours_s, torch_s = seconds["ours"], seconds["torch"]
        return KernelRow(name, size, counterpart, ours_s, torch_s, flops, moved, unit, peak)

    yield from _matmul_rows(measure, sizes["matmul"], device, generator)
    if not quick:  # the kernels issue's other shapes: a grid smaller than the GPU, and a wide K-thin one
        for m, k, n in MATMUL_SHAPES:
            yield from _matmul_rows(measure, (m, k, n), device, generator, methods=("register", "vector"))
    yield from _reduction_rows(measure, sizes["vector"], device, generator)
    yield from _optimizer_rows(measure, sizes["params"], device, generator)
    yield from _clip_rows(measure, sizes["params"], device, generator)
    yield from _xent_rows(measure, *sizes["xent"], device, generator)
    if not quick:
        yield from _xent_rows(measure, *WIDE_XENT, device, generator)


def _matmul_rows(
    measure: Measure,
    shape: int | tuple[int, int, int],
    device: torch.device,
    generator: torch.Generator,
    methods: tuple[str, ...] = ("naive", "tiled", "register", "vector"),
):
    """Rows for op(a) M×K @ op(b) K×N (`shape` n: n³): each method, and the register and vector kernels with
    a transposed operand (a square shape only: the same operands serve every form)."""
    from workbench.kernels import matmul

    m, k, n = (shape, shape, shape) if isinstance(shape, int) else shape
    a = torch.randn(m, k, device=device, generator=generator)
    b = torch.randn(k, n, device=device, generator=generator)
    flops, moved = 2 * m * k * n, 4 * (m * k + k * n + m * n)  # each matrix read or written once at least
    size = f"{n}³" if m == k == n else f"{m}×{k}×{n}"
    forms = [(f"matmul {method}", method, False, False) for method in methods]
    if m == k == n:
        for method in ("register", "vector"):
            forms += [
                (f"matmul {method} Aᵀ@B", method, True, False),
                (f"matmul {method} A@Bᵀ", method, False, True),
            ]
    with float32_matmul_precision("highest"):  # IEEE fp32: TF32 off, restored after
        for label, method, transpose_a, transpose_b in forms:

            def ours(method=method, ta=transpose_a, tb=transpose_b):
                return matmul(a, b, method=method, transpose_a=ta, transpose_b=tb)

            def theirs(ta=transpose_a, tb=transpose_b):
                return torch.mm(a.T if ta else a, b.T if tb else b)

            yield measure(label, size, "torch.mm (fp32, TF32 off)", ours, theirs, flops, moved, "GFLOP/s")


def _reduction_rows(measure: Measure, n: int, device: torch.device, generator: torch.Generator):
    from workbench.kernels import squared_norm
    from workbench.kernels import sum as numba_sum

    x = torch.randn(n, device=device, generator=generator)
    size = _count(n)
    yield measure(
        "sum", size, "torch.sum().item()", lambda: numba_sum(x), lambda: x.sum().item(), n, 4 * n, "GB/s"
    )
    yield measure(
        "squared_norm",
        size,
        "vector_norm().item()",
        lambda: squared_norm(x),
        lambda: torch.linalg.vector_norm(x).item(),
        2 * n,
        4 * n,
        "GB/s",
    )


def _optimizer_rows(measure: Measure, n: int, device: torch.device, generator: torch.Generator):
    """SGD, Adam and AdamW on one flat tensor of `n` parameters, and Adam on a model's `_MODEL_TENSORS`
    tensors of `n` in all (the kernels issue's two cases)."""
    from workbench.kernels import FusedAdam, FusedSGD

    adamw = {"lr": 1e-3, "weight_decay": 0.01}
    # (label, ours, our options, torch's, its options, tensors, floats moved per parameter, FLOPs per one)
    plans = (
        ("SGD momentum", FusedSGD, {}, torch.optim.SGD, {"lr": 1e-3, "momentum": 0.9}, 1, 5, 4),
        ("Adam", FusedAdam, {}, torch.optim.Adam, {"lr": 1e-3}, 1, 7, 15),
        ("AdamW", FusedAdam, {"decoupled": True}, torch.optim.AdamW, adamw, 1, 7, 16),
        ("Adam", FusedAdam, {}, torch.optim.Adam, {"lr": 1e-3}, _MODEL_TENSORS, 7, 15),
    )
    for label, fused, our_options, reference, options, tensors, floats, flops in plans:
        sizes = _tensor_sizes(n, tensors)
        total = sum(sizes)  # n, unless n is smaller than the tensors
        models = [_parameters(sizes, device, generator) for _ in range(2)]
        ours, theirs = fused(models[0], **our_options, **options), reference(models[1], fused=True, **options)
        size = f"{_count(total)} params" + (f" in {tensors} tensors" if tensors > 1 else "")
        yield measure(
            label,
            size,
            f"{reference.__name__}(fused=True)",
            ours.step,
            theirs.step,
            flops * total,
            4 * floats * total,
            "GB/s",
        )
        del models, ours, theirs  # before the next plan's (100M parameters are big)


def _tensor_sizes(n: int, tensors: int) -> list[int]:
    """`tensors` sizes that add up to `n` (at least one element each): one, or a model's weight and bias
    pairs (biases of 1024, fewer for a small `n`).

    Example:
        >>> sizes = _tensor_sizes(1_000_000, 200)
        >>> len(sizes), sum(sizes), sizes[:2]
        (200, 1000000, [8976, 1024])
    """
    if tensors == 1:
        return [n]
    bias = min(1024, max(1, n // (4 * tensors)))
    weight = max(1, (n - bias * tensors // 2) // (tensors // 2))
    sizes = [weight, bias] * (tensors // 2)
    sizes[0] += max(0, n - sum(sizes))
    return sizes


def _parameters(
    sizes: list[int], device: torch.device, generator: torch.Generator
) -> list[torch.nn.Parameter]:
    params = []
    for size in sizes:
        p = torch.nn.Parameter(torch.randn(size, device=device, generator=generator))
        p.grad = torch.randn(size, device=device, generator=generator)
        params.append(p)
    return params


def _clip_rows(measure: Measure, n: int, device: torch.device, generator: torch.Generator):
    from workbench.kernels import clip_grad_norm

    grads = [
        torch.randn(n // _CLIP_TENSORS, device=device, generator=generator) for _ in range(_CLIP_TENSORS)
    ]
    # norm: read every gradient once; scale: read and write it once (max_norm is small: it always scales)
    yield measure(
        "clip_grad_norm",
        f"{_count(n)} in {_CLIP_TENSORS} tensors",
        "clip_grad_norm_(foreach=True)",
        lambda: clip_grad_norm(grads, 1e-3),
        torch_clip_grad_norm(grads, 1e-3),
        3 * n,
        12 * n,
        "GB/s",
    )


def torch_clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> Callable[[], float]:
    """torch's clipping of the same gradients, as ``.grad`` of parameters (it reads ``p.grad``; given the
    tensors themselves it finds no gradient and returns at once: the first GPU report measured that).

    Example:
        >>> grads = [torch.full((4,), 3.0), torch.full((4,), 4.0)]
        >>> clip = torch_clip_grad_norm(grads, 1.0)
        >>> clip(), round(float(torch.cat(grads).norm()), 4)
        (10.0, 1.0)
    """
    params = []
    for grad in grads:
        param = torch.nn.Parameter(torch.empty(1, device=grad.device).expand_as(grad))  # no memory
        param.grad = grad  # the same tensors: clipping scales them in place
        params.append(param)
    return lambda: float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True))


def _xent_rows(measure: Measure, rows: int, classes: int, device: torch.device, generator: torch.Generator):
    """Forward and backward as autograd runs them: d loss / d logits, a fresh gradient per call."""
    from workbench.kernels import numba_cross_entropy

    logits = torch.randn(rows, classes, device=device, generator=generator, requires_grad=True)
    targets = torch.randint(0, classes, (rows,), device=device, generator=generator)
    yield measure(
        "softmax_cross_entropy fwd+bwd",
        f"{rows}×{classes}",
        "F.cross_entropy fwd+bwd",
        lambda: torch.autograd.grad(numba_cross_entropy(logits, targets), logits),
        lambda: torch.autograd.grad(functional.cross_entropy(logits, targets), logits),
        7 * rows * classes,  # forward: max, subtract, exp, add; backward: subtract, exp, scale per logit
        12 * rows * classes,  # the logits read twice, their gradient written once
        "GB/s",
    )


def main(argv: list[str] | None = None) -> int:
    """``workbench bench kernels [--repeats N] [--full]``: print the table; 0 also without a GPU (saying why).

    Example:
        >>> main(["--repeats", "0"])  # the error goes to stderr
        2
    """
    parser = argparse.ArgumentParser(
        prog="workbench bench kernels", description="numba kernels against torch on this GPU"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed samples per measurement (median)")
    parser.add_argument("--full", action="store_true", help="matmul 4096³, 100M-parameter Adam and clipping")
    static_help = "no GPU needed: compile and predict (registers, occupancy, roofline)"
    parser.add_argument("--static", action="store_true", help=static_help)
    parser.add_argument(
        "--host",
        action="store_true",
        help="no GPU needed: host time of an Adam step, launches stubbed, one launch per group vs per tensor",
    )
    launch_help = "host µs of one kernel call from torch tensors against a bare numba launch"
    parser.add_argument("--launch", action="store_true", help=launch_help)
    args = parser.parse_args(argv)
    timed_on_host = "--launch" if args.launch else "--host" if args.host else None
    if timed_on_host and args.repeats < 1:
        print(
            f"workbench bench kernels {timed_on_host}: error: --repeats must be ≥ 1, got {args.repeats}",
            file=sys.stderr,
        )
        return 2
    if args.launch:
        from workbench.bench.launch_cost import benchmark_launch_cost

        print(benchmark_launch_cost(repeats=args.repeats).table())
        return 0
    if args.host:
        from workbench.bench.optimizer_host import benchmark_optimizer_host

        print(benchmark_optimizer_host(repeats=args.repeats).table())
        print(f"launches stubbed; median [range] of {args.repeats} repeats of 20 steps, variants alternating")
        return 0
    if args.static:
        from workbench.bench.kernels_static import static_prediction

        try:
            print(static_prediction(quick=not args.full).table())
        except RuntimeError as error:
            print(f"workbench bench kernels --static: error: {error}", file=sys.stderr)
            return 2
        return 0
    try:
        result = benchmark_kernels(quick=not args.full, repeats=args.repeats)
    except ValueError as error:
        print(f"workbench bench kernels: error: {error}", file=sys.stderr)
        return 2
    print(result.table())
    if result.reason is None:
        mode = "quick" if result.quick else "full"
        print(f"GPU: {result.gpu}; {mode} run, median of {args.repeats}, {result.seconds:.1f} s")
    else:
        print(NO_GPU_OPTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
