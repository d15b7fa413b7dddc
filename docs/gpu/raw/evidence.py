"""Evidence the GPU report cites beside `workbench gpu-check`, run on the GPU machine:

    python3 docs/gpu/raw/evidence.py workspaces            # what cuBLAS/cuBLASLt hold after a first product
    ncu --profile-from-start off ... python3 docs/gpu/raw/evidence.py kernels   # Nsight Compute's view
    python3 docs/gpu/raw/evidence.py profile       # per call: host time, wall time, the GPU kernels in it
    python3 docs/gpu/raw/evidence.py memory        # what is alive at each estimator case's CUDA peak
    python3 docs/gpu/raw/evidence.py matmul_tiles  # GFLOP/s of cuBLAS and our matmuls, tiles and shapes

`workspaces` prints, as JSON, the bytes torch's CUDA allocator holds after the first fp32, bf16 and
backward products of a fresh process (the library workspaces the memory estimate leaves out); `kernels`
runs the register-tiled and vectorized matmuls and cuBLAS at 4096³ (TF32 off) and our fused Adam and
torch's on 16M parameters once each inside cudaProfilerStart/Stop, after a warm-up that compiles, so that
``ncu --profile-from-start off`` reads those five kernels alone. `profile` times each benchmarked kernel
call and its torch counterpart three ways (the host's time to return, the wall time to a synchronize, the
kernels torch.profiler saw, by name), so a gap shows as host work, a wait, or device time. `memory`
records the CUDA allocator's history over `measure_peak` for each case of the estimator's matrix and
prints the blocks alive at the peak, largest first, with the Python frames that allocated them.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch


def workspaces() -> dict[str, int]:
    torch.ones(1, device="cuda")
    held = {"after context": torch.cuda.memory_allocated()}
    a = torch.randn(256, 256, device="cuda")
    base = torch.cuda.memory_allocated()
    torch.mm(a, a)
    torch.cuda.synchronize()
    held["fp32 mm"] = torch.cuda.memory_allocated() - base
    base = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        torch.nn.functional.linear(a, a, a[0])
    torch.cuda.synchronize()
    held["bf16 linear (cuBLASLt)"] = torch.cuda.memory_allocated() - base
    w = a.clone().requires_grad_()
    base = torch.cuda.memory_allocated()
    torch.nn.functional.linear(a, w, w[0]).sum().backward()
    torch.cuda.synchronize()
    held["fp32 linear backward"] = torch.cuda.memory_allocated() - base - w.grad.nelement() * 4
    return held


def kernels() -> None:
    from workbench.kernels import FusedAdam, matmul

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    ours = [torch.zeros(16_000_000, device="cuda", requires_grad=True)]
    theirs = [torch.zeros(16_000_000, device="cuda", requires_grad=True)]
    for p in ours + theirs:
        p.grad = torch.randn_like(p)
    adam, torch_adam = FusedAdam(ours, lr=1e-3), torch.optim.Adam(theirs, lr=1e-3, fused=True)
    for _ in range(2):  # compile, create state
        matmul(a, b), matmul(a, b, method="vector"), torch.mm(a, b), adam.step(), torch_adam.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    matmul(a, b)
    matmul(a, b, method="vector")
    torch.mm(a, b)
    adam.step()
    torch_adam.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _profile_call(run: Callable[[], object], calls: int = 10) -> dict[str, object]:
    try:
        return _profiled(run, calls)
    except Exception as error:  # one failing call leaves the others' evidence
        return {"error": repr(error)[:300]}


def _profiled(run: Callable[[], object], calls: int) -> dict[str, object]:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    host, wall = [], []
    for _ in range(calls):
        started = time.perf_counter()
        run()
        returned = time.perf_counter()
        torch.cuda.synchronize()
        host.append(returned - started)
        wall.append(time.perf_counter() - started)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as recorded:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for event in recorded.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.name[:60]
            kernels[name] = kernels.get(name, 0.0) + event.device_time / calls
    return {
        "host_us": round(1e6 * statistics.median(host), 1),
        "wall_us": round(1e6 * statistics.median(wall), 1),
        "kernel_us": round(sum(kernels.values()), 1),
        "kernels": {name: round(us, 1) for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:6]},
    }


def profile_kernels() -> dict[str, dict[str, object]]:
    from workbench.bench.kernels import torch_clip_grad_norm
    from workbench.kernels import FusedAdam, FusedSGD, clip_grad_norm, numba_cross_entropy, squared_norm
    from workbench.kernels import sum as numba_sum

    n = 100_000_000
    x = torch.randn(n, device="cuda")
    found: dict[str, dict[str, object]] = {}
    found["sum ours"] = _profile_call(lambda: numba_sum(x))
    found["sum torch"] = _profile_call(lambda: x.sum().item())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for threads, per_sm in ((256, 4), (256, 8), (256, 16), (512, 4), (1024, 2)):
        found[f"sum ours {threads} threads, {per_sm} blocks/SM"] = _profile_call(
            lambda threads=threads, per_sm=per_sm: numba_sum(x, threads=threads, blocks=per_sm * sms)
        )
    found["squared_norm ours"] = _profile_call(lambda: squared_norm(x))
    found["squared_norm torch"] = _profile_call(lambda: torch.linalg.vector_norm(x).item())
    grads = list(x.chunk(10))
    found["clip ours"] = _profile_call(lambda: clip_grad_norm(grads, 1e-3))
    found["clip torch"] = _profile_call(torch_clip_grad_norm(grads, 1e-3))
    x = grads = None  # freed before the optimizers' 800 MB
    for label, ours, theirs, options in (
        ("SGD", FusedSGD, torch.optim.SGD, {"lr": 1e-3, "momentum": 0.9}),
        ("Adam", FusedAdam, torch.optim.Adam, {"lr": 1e-3}),
    ):
        params = [torch.nn.Parameter(torch.randn(n, device="cuda")) for _ in range(2)]
        for p in params:
            p.grad = torch.randn(n, device="cuda")
        found[f"{label} ours"] = _profile_call(ours([params[0]], **options).step)
        found[f"{label} torch"] = _profile_call(theirs([params[1]], fused=True, **options).step)
        del params
    many = [torch.nn.Parameter(torch.randn(500_000, device="cuda")) for _ in range(400)]
    for p in many:
        p.grad = torch.randn_like(p)
    found["Adam 200 tensors ours"] = _profile_call(FusedAdam(many[:200], lr=1e-3).step)
    found["Adam 200 tensors torch"] = _profile_call(torch.optim.Adam(many[200:], lr=1e-3, fused=True).step)
    del many
    for rows, classes in ((32768, 1000), (8192, 50000)):
        logits = torch.randn(rows, classes, device="cuda", requires_grad=True)
        targets = torch.randint(0, classes, (rows,), device="cuda")
        found[f"xent {rows}x{classes} ours"] = _profile_call(
            lambda logits=logits, targets=targets: torch.autograd.grad(
                numba_cross_entropy(logits, targets), logits
            )
        )
        found[f"xent {rows}x{classes} torch"] = _profile_call(
            lambda logits=logits, targets=targets: torch.autograd.grad(
                torch.nn.functional.cross_entropy(logits, targets), logits
            )
        )
        del logits
    return found


def peak_blocks(trace: list[dict], top: int = 12) -> dict[str, object]:
    """Replay an allocator trace (``torch.cuda.memory._snapshot()["device_traces"][i]``): the bytes alive at
    the peak, the largest blocks then, each with its innermost Python frames, and every block then summed by
    those frames (bytes, blocks, where).

    Example:
        >>> trace = [{"action": "alloc", "addr": 1, "size": 4, "frames": []},
        ...          {"action": "alloc", "addr": 2, "size": 8, "frames": [{"filename": "m.py", "line": 3,
        ...           "name": "f"}]}, {"action": "free_completed", "addr": 1, "size": 4, "frames": []}]
        >>> peak_blocks(trace)["peak_bytes"], peak_blocks(trace)["blocks"][0][1]
        (12, 'm.py:3 f')
        >>> peak_blocks(trace)["by_place"]
        [(8, 1, 'm.py:3 f'), (4, 1, '(no Python frame)')]
    """
    live: dict[int, tuple[int, str]] = {}
    total = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for event in trace:
        action = event["action"]
        if action == "alloc":
            frames = [
                f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}"
                for f in event.get("frames", [])
                if not f["filename"].endswith(("torch/nn/modules/module.py", "torch/_tensor.py"))
            ]
            live[event["addr"]] = (event["size"], " < ".join(frames[:3]))
            total += event["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif action == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])[0]
    blocks = sorted(at_peak.values(), key=lambda block: -block[0])
    places: dict[str, list[int]] = {}  # every block alive at the peak, by where it was allocated
    for size, where in blocks:
        places.setdefault(where or "(no Python frame)", []).append(size)
    by_place = sorted(places.items(), key=lambda item: -sum(item[1]))
    return {
        "peak_bytes": peak,
        "blocks": [(size, where) for size, where in blocks[:top]],
        "by_place": [(sum(sizes), len(sizes), where) for where, sizes in by_place[: 3 * top]],
    }


def memory() -> dict[str, object]:
    import dataclasses

    sys.path.insert(0, ".")
    from tests.estimate.test_peak_matrix import CASES
    from tests.gpu.helpers import cuda_estimates, cuda_peak

    found: dict[str, object] = {}
    for name, case in CASES.items():
        try:
            traced, on_cpu = cuda_estimates(case)  # before the recording: its check's steps run on the GPU
            torch.cuda.empty_cache()
            torch.cuda.memory._record_memory_history(max_entries=500_000, stacks="python")
            real = cuda_peak(case)
            trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
            parts = dataclasses.asdict(traced) if dataclasses.is_dataclass(traced) else vars(traced)
            found[name] = {
                "estimate_mib": round(traced.total / 2**20, 2),
                "basis": traced.basis,
                "estimate_on_cpu_mib": round(on_cpu.total / 2**20, 2),
                "peak_mib": round(real.peak / 2**20, 2),
                "held_apart_mib": round(real.held_apart / 2**20, 2),
                "band": traced.uncertainty,
                "estimate_parts_mib": {
                    k: round(v / 2**20, 2)
                    for k, v in parts.items()
                    if isinstance(v, int) and not isinstance(v, bool)
                },
                **peak_blocks(trace),
            }
        except Exception as error:  # one failing case leaves the others' evidence
            found[name] = {"error": repr(error)[:300]}
        torch.cuda.memory._record_memory_history(enabled=None)
        torch.cuda.empty_cache()
    return found


def matmul_tiles(repeats: int = 15) -> dict[str, dict[str, float]]:
    """GFLOP/s of cuBLAS (TF32 off), the register matmul and the vector matmul at 128×128 and 64×64 tiles,
    per size: the evidence for `vector_threads`' choice of tile and the kernels issue's other shapes.
    Alternating variants, CUDA events, the median of `repeats` samples of 3 calls each."""
    from workbench.kernels import matmul

    torch.backends.cuda.matmul.allow_tf32 = False
    variants: dict[str, Callable] = {
        "cuBLAS": lambda a, b: torch.mm(a, b),
        "register": lambda a, b: matmul(a, b),
        "vector 128×128": lambda a, b: matmul(a, b, method="vector", block=16),
        "vector 64×64": lambda a, b: matmul(a, b, method="vector", block=8),
    }
    found = {}
    for m, k, n in ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 1024, 8192)):
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for run in variants.values():  # compile and warm up
            run(a, b)
        for _ in range(repeats):
            for name, run in variants.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(3):
                    run(a, b)
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) / 3 / 1e3)
        flops = 2 * m * k * n
        found[f"{m}×{k}×{n}"] = {
            name: round(flops / statistics.median(seconds) / 1e9) for name, seconds in samples.items()
        }
    return found


if __name__ == "__main__":
    if sys.argv[1] == "matmul_tiles":
        print(json.dumps(matmul_tiles(), indent=1))
    elif sys.argv[1] == "workspaces":
        print(json.dumps(workspaces()))
    elif sys.argv[1] == "profile":
        print(json.dumps(profile_kernels(), indent=1))
    elif sys.argv[1] == "memory":
        print(json.dumps(memory(), indent=1, default=str))
    else:
        kernels()
