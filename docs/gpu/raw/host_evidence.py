"""Where the host's time goes on a GPU machine, for the rows of the GPU report that lose on the host:

    python3 docs/gpu/raw/host_evidence.py launch     # one kernel call from torch tensors, part by part
    python3 docs/gpu/raw/host_evidence.py trainer    # cProfile and CUDA syncs of Trainer.fit vs a hand loop

`launch` times (median of 200, microseconds) each part of a numba kernel call on torch CUDA tensors: the
tensor's ``__cuda_array_interface__``, numba's view of it, torch's current stream wrapped for numba, the
configured launch object, a bare launch of prepared device arrays and our whole `sum`; then cProfile's
top functions over 200 calls of `sum` and of `FusedAdam.step`. `trainer` runs `Trainer.fit` on the GPU
report's GPT and on the peers' MLP once under cProfile (top functions), once with CUDA's sync debug mode
on (each host wait counted by the line of our code that caused it) and once under torch.profiler (the
GPU's kernels and their share of the wall), the GPT's hand loop too.
"""

from __future__ import annotations

import collections
import cProfile
import io
import pstats
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable

import torch

from workbench.bench.gpu_training import _synchronize as _sync


def _median_us(run: Callable[[], object], repeats: int = 200) -> float:
    for _ in range(10):
        run()
    _sync()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    _sync()
    return round(1e6 * statistics.median(samples), 1)


def _top(run: Callable[[], object], calls: int, lines: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        run()
    _sync()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(lines)
    stats.sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def launch() -> None:
    from workbench.kernels import FusedAdam
    from workbench.kernels import sum as numba_sum
    from workbench.kernels._numba import as_buffer, load_cuda
    from workbench.kernels.reduce import _reduce_kernel

    cuda = load_cuda()
    x = torch.randn(1_000_000, device="cuda")
    out = torch.zeros(1, device="cuda")
    numba_sum(x)  # compiles
    kernel = _reduce_kernel(256, False)
    dx, dout = cuda.as_cuda_array(x, sync=False), cuda.as_cuda_array(out, sync=False)
    stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    parts = {
        "x.__cuda_array_interface__": lambda: x.__cuda_array_interface__,
        "cuda.as_cuda_array(x, sync=False)": lambda: cuda.as_cuda_array(x, sync=False),
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        "cuda.external_stream(ptr)": lambda: cuda.external_stream(torch.cuda.current_stream().cuda_stream),
        "cuda.get_current_device()": lambda: cuda.get_current_device(),
        "kernel[grid, block, stream]": lambda: kernel[528, 256, stream],
        "kernel[...](numba arrays), default stream": lambda: kernel[528, 256](dx, dout),
        "kernel[...](numba arrays), external stream": lambda: kernel[528, 256, stream](dx, dout),
        "kernel[...](torch tensors), external stream": lambda: kernel[528, 256, stream](x, out),
        "as_buffer(x)": lambda: as_buffer(x, "x"),
        "as_buffer(x).flat()": lambda: as_buffer(x, "x").flat(),
        "torch.zeros(1, cuda)": lambda: torch.zeros(1, device="cuda"),
        "out.item()": lambda: out.item(),
        "workbench sum(x), 1M": lambda: numba_sum(x),
        "torch x.sum().item(), 1M": lambda: x.sum().item(),
    }
    for name, run in parts.items():
        try:
            print(f"{_median_us(run):10.1f} us  {name}")
        except Exception as error:
            print(f"     error  {name}: {error!r}"[:300])
    from workbench.bench.launch_cost import _launch_path
    from workbench.kernels._numba import launch as launch_kernel

    def ours() -> None:
        x_buffer = as_buffer(x, "x")
        launch_kernel(kernel, 528, 256, x_buffer.stream(), x_buffer, as_buffer(out, "out"))

    for choice in ("direct", "numba"):  # the variable is read at each launch: set around the whole timing
        with _launch_path(choice):  # (the caller's value, if any, comes back after)
            print(f"{_median_us(ours):10.1f} us  as_buffer ×2 + launch, {choice}")
            print(f"{_median_us(lambda: numba_sum(x)):10.1f} us  workbench sum(x), 1M, {choice}")
    p = torch.nn.Parameter(torch.randn(1_000_000, device="cuda"))
    p.grad = torch.randn_like(p)
    adam = FusedAdam([p], lr=1e-3)
    print(f"{_median_us(adam.step):10.1f} us  FusedAdam.step, 1M")
    q = torch.nn.Parameter(torch.randn(1_000_000, device="cuda"))
    q.grad = torch.randn_like(q)
    torch_adam = torch.optim.Adam([q], lr=1e-3, fused=True)
    print(f"{_median_us(torch_adam.step):10.1f} us  torch Adam(fused=True).step, 1M")
    print(_top(lambda: numba_sum(x), 200))
    print(_top(adam.step, 200))


def _count_syncs(run: Callable[[], object]) -> collections.Counter:
    """Host waits on the GPU during `run`, counted by the innermost frame in workbench (or the bench)."""
    counts: collections.Counter = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        frames = [
            f
            for f in traceback.extract_stack()
            if "workbench" in f.filename and "host_evidence" not in f.filename
        ]
        where = (
            f"{frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno} {frames[-1].name}"
            if frames
            else "?"
        )
        counts[f"{where} | {str(message)[:60]}"] += 1

    saved = warnings.showwarning
    warnings.showwarning = record
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            run()
    finally:
        if on_gpu:
            torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = saved
    return counts


def _device_work(run: Callable[[], object], rows: int = 15) -> str:
    """What the GPU did during `run()` (torch.profiler, CPU and CUDA): the wall time, the kernels' summed
    time (their share of the wall: the rest the GPU idled or copied), and the kernels taking the most, so
    two loops' device work can be compared kernel by kernel."""
    from workbench._profiler import profile

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with profile(activities=activities) as recorded:
        _sync()
        started = time.perf_counter()  # inside: the profiler's own start is not the loop's
        run()
        _sync()
        wall_ms = 1e3 * (time.perf_counter() - started)
    averages = recorded.key_averages()
    kernel_ms = sum(getattr(a, "self_device_time_total", 0) for a in averages) / 1e3
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = averages.table(sort_by=sort, row_limit=rows, max_name_column_width=60)
    share = kernel_ms / wall_ms
    return f"wall {wall_ms:.1f} ms, kernels {kernel_ms:.1f} ms ({share:.0%} of the wall)\n{table}"


def trainer() -> None:
    import copy

    from workbench import models
    from workbench.bench import gpu_training
    from workbench.bench.peers import benchmark_peers  # noqa: F401  (imports the peers' module as the check does)
    from workbench.bench.trainer_variants import bench_model, bench_setup
    from workbench.data import Splits
    from workbench.train import Trainer

    splits, model, config = gpu_training._setup(1024, "cuda", gpu_training.D_MODEL)
    config = config.replace(precision="bf16")
    gpt = Trainer(copy.deepcopy(model), models.next_token_loss, splits, config)
    hand = gpu_training._hand_loop(copy.deepcopy(model), splits, config, torch.bfloat16)
    gpt.fit(), hand()
    print("GPT Trainer.fit s/step", gpu_training._per_step(lambda: gpt.fit().step))
    print("GPT hand loop  s/step", gpu_training._per_step(hand))
    print("syncs in one GPT Trainer.fit:")
    for where, n in _count_syncs(lambda: gpt.fit()).most_common(12):
        print(f"  {n:5d}  {where}")
    print("syncs in one GPT hand loop:")
    for where, n in _count_syncs(hand).most_common(5):
        print(f"  {n:5d}  {where}")
    print(_top(lambda: gpt.fit(), 2, 30))
    print("the GPU's work in one GPT Trainer.fit:")
    print(_device_work(lambda: gpt.fit()))
    print("the GPU's work in one GPT hand loop:")
    print(_device_work(hand))

    from torch.nn import functional
    from torch.utils.data import TensorDataset

    mlp_splits, mlp_config = bench_setup(1)
    data = Splits(
        TensorDataset(mlp_splits.train.features, mlp_splits.train.targets),
        val=TensorDataset(mlp_splits.val.features, mlp_splits.val.targets),
    )
    mlp_config = mlp_config.replace(device="cuda")
    mlp = Trainer(bench_model(), functional.cross_entropy, data, mlp_config)
    mlp.fit()
    print("MLP Trainer.fit s/step", gpu_training._per_step(lambda: mlp.fit().step))
    print("syncs in one MLP Trainer.fit:")
    for where, n in _count_syncs(lambda: mlp.fit()).most_common(12):
        print(f"  {n:5d}  {where}")
    print(_top(lambda: mlp.fit(), 2, 30))
    print("the GPU's work in one MLP Trainer.fit:")
    print(_device_work(lambda: mlp.fit()))


if __name__ == "__main__":
    {"launch": launch, "trainer": trainer}[sys.argv[1]]()
