"""Evidence the GPU report cites beside `workbench gpu-check`, run on the GPU machine:

    python3 docs/gpu/raw/evidence.py workspaces            # what cuBLAS/cuBLASLt hold after a first product
    ncu --profile-from-start off ... python3 docs/gpu/raw/evidence.py kernels   # Nsight Compute's view

`workspaces` prints, as JSON, the bytes torch's CUDA allocator holds after the first fp32, bf16 and
backward products of a fresh process (the library workspaces the memory estimate leaves out); `kernels`
runs the register-tiled matmul and cuBLAS at 4096³ (TF32 off) and our fused Adam and torch's on 16M
parameters once each inside cudaProfilerStart/Stop, after a warm-up that compiles, so that
``ncu --profile-from-start off`` reads those four kernels alone.
"""

from __future__ import annotations

import json
import sys

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
        matmul(a, b), torch.mm(a, b), adam.step(), torch_adam.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    matmul(a, b)
    torch.mm(a, b)
    adam.step()
    torch_adam.step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    if sys.argv[1] == "workspaces":
        print(json.dumps(workspaces()))
    else:
        kernels()
