"""Run as a script: compiles kernels that must fail the static checks and prints their problems as JSON
(name → list). Used by test_compiled.py to show the checks can fail. Importing it does nothing (pytest's
doctest collection imports every module): numba's GPU target is chosen in `main` only."""

import json
import os
import sys
from functools import partial


def main() -> None:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # before numba is first imported: compile for a real GPU
    from numba import cuda

    from workbench.kernels import gemm
    from workbench.kernels.static import compile_target, problems
    from workbench.kernels.targets import F32_1D, F32_2D, KernelTarget

    @cuda.jit
    def doubles(x):  # float64 arithmetic in what claims to be an fp32 kernel
        i = cuda.grid(1)
        if i < x.size:
            x[i] = x[i] * 1.000000001

    arch = sys.argv[1]
    matrices = f"({F32_2D}, {F32_2D}, {F32_2D})"
    naive = partial(gemm._naive_kernel, False, False)
    tiled = partial(gemm._tiled_kernel, False, False, 16)
    cases = {  # what breaks, and a register cap for ptxas (the tiled kernel needs about 32)
        "spills": (KernelTarget("tiled in 16 registers", tiled, matrices, 256, 1), 16),
        "float64": (KernelTarget("float64", lambda: doubles, f"({F32_1D},)", 256, 1), None),
        "too many threads": (KernelTarget("2048 threads", naive, matrices, 2048, 1), None),
        "partial warps": (KernelTarget("100 threads", naive, matrices, 100, 1), None),
        "occupancy": (KernelTarget("naive, 16 blocks counted on", naive, matrices, 256, 16), None),
    }
    found = {}
    for name, (target, max_registers) in cases.items():
        report = compile_target(target, arch, max_registers=max_registers)
        found[name] = problems(report, target)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
