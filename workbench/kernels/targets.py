"""Every kernel the package launches on a GPU, as the host code launches it: which compiled variant, with
which argument types, on how many threads per block, and the occupancy the launch code counts on.

`workbench.kernels.static` compiles each target with NVIDIA's compiler and checks it against these
expectations (no GPU needed); each kernel module lists its own in ``gpu_targets()``, built from the same
constants its host code launches with, and `workbench.kernels.static.all_targets` gathers them (this module
imports no kernel module: they import it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# numba signature spellings of what the host code passes on a GPU: contiguous device views of torch
# tensors (layout C), float32 scalars made with np.float32, Python bools
F32_1D, F32_2D = "float32[::1]", "float32[:, ::1]"


@dataclass(frozen=True)
class KernelTarget:
    """One kernel as launched on a GPU.

    Attributes:
        name: what tables call it, e.g. ``"matmul register"``.
        build: returns the ``numba.cuda.jit`` dispatcher (the module's cached factory, called with the
            options the host code passes on a GPU).
        signature: the argument types the host code passes, in numba's spelling.
        threads: threads per block of the launch.
        min_blocks_per_sm: resident blocks per SM the launch counts on (its occupancy assumption): a
            memory-bound grid-stride kernel needs enough warps in flight, a tiled one at least 2 blocks to
            overlap one block's loads with another's math.
        fp32: True where no float64 may appear (every kernel here computes in fp32).
    """

    name: str
    build: Callable[[], Any]
    signature: str
    threads: int
    min_blocks_per_sm: int
    fp32: bool = True
