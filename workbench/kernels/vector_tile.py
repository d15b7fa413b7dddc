"""The vectorized register-tiled matmul: 128-bit loads everywhere, 4×4 quadrants, no bounds work in its loop.

The same 2-D blocktiling as `workbench.kernels.register_tile` (a block of T×T threads computes an 8T × 8T
tile of c through slabs of depth 8 staged in shared memory; each thread keeps 8×8 sums in registers), with
the steps siboehm's SGEMM worklog (kernels 6 and 10) and CUTLASS take next:

- every global load, shared-memory read and store of c moves four floats at once (``ld.global.v4.f32``,
  ``ld.shared.v4.f32``, `workbench.kernels.vector_access`): per k a thread issues 4 shared reads for its 64
  multiply-adds (the register kernel: 16);
- a thread owns four 4×4 quadrants, rows ``4·ty + {0..3}`` and ``4T + 4·ty + {0..3}`` (columns likewise with
  tx): eight neighbouring threads read 128 consecutive bytes of a slab (no bank conflicts) and store whole
  32-byte sectors of c;
- a slab of op(a) is kept k-major (transposed) in shared memory, so a thread's four rows are one vector read;
- no bounds check in the loop over k: rows and columns past the matrix are clamped to its last ones once per
  thread (their sums are never stored), and k runs in whole chunks of 4 (K % 4 == 0), so only the slab that
  crosses K tests its chunks;
- indices into a slab are a per-thread base plus compile-time constants, and the vector accesses have no
  negative-index wrap-around.

It needs what 128-bit accesses need: M, N and K multiples of 4 and operands aligned to 16 bytes
(`vector_ready`); `workbench.kernels.gemm.matmul(method="vector")` runs the register kernel on any other.
`vector_source(False, False, 2)` shows a small one. Generated kernels are cached on disk as the register
kernel's are (`workbench.kernels.register_tile`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from workbench.kernels import vector_access
from workbench.kernels.register_tile import compile_generated, prologue

DEPTH = 8  # k-depth of a slab
PER_THREAD = 8  # sums per side of a thread: two quadrants of 4
WIDTH = vector_access.WIDTH
PAD = 4  # floats added to each shared row: 16-byte rows, and a's transposed stores spread over the banks
# Launch bounds' resident blocks: 1. Asking for 2 caps ptxas at 128 registers, and the 64 sums, 16 fragment
# values and prefetched chunks then spill (32-112 bytes a thread at T=16; at 1: 141-161 registers, none).
BLOCKS_PER_SM = 1
# Threads per side (8T × 8T tiles): on a GPU 16, or 8 for outputs of fewer tiles than SMs (`vector_threads`)
THREAD_CHOICES = (2, 4, 8, 16)
GPU_THREADS = (16, 8)


def tile_of(threads: int) -> int:
    """Edge of the c tile a block of `threads` × `threads` computes (8 sums per side per thread)."""
    return PER_THREAD * threads


def vector_threads(m: int, n: int, multiprocessors: int) -> int:
    """Threads per side for an M×N output on a GPU of `multiprocessors` SMs: 16 (128×128 tiles) when there
    are at least as many tiles as SMs, else 8 (64×64 tiles: four times the blocks, so a small output still
    spreads over the GPU).

    Example:
        >>> vector_threads(4096, 4096, 132), vector_threads(1024, 1024, 132)
        (16, 8)
    """
    tiles = math.ceil(m / tile_of(16)) * math.ceil(n / tile_of(16))
    return 16 if tiles >= multiprocessors else 8


def vector_ready(m: int, n: int, k: int, addresses: tuple[int, ...]) -> bool:
    """True when the vector kernel can take op(a) M×K @ op(b) K×N: every size a multiple of 4 and every
    operand's address a multiple of 16 bytes.

    Example:
        >>> vector_ready(128, 64, 12, (0, 4096, 8192)), vector_ready(128, 64, 10, (0, 4096, 8192))
        (True, False)
    """
    sizes_ok = all(size % WIDTH == 0 for size in (m, n, k))
    return sizes_ok and all(address % (4 * WIDTH) == 0 for address in addresses)


def vector_source(transpose_a: bool, transpose_b: bool, threads: int) -> str:
    """Python source of the kernel ``vector(a, b, c)`` for T = `threads` (see the module docstring).

    Example:
        >>> source = vector_source(False, False, 2)
        >>> source.count("load4(a_s"), source.count("+= a"), "if row" in source.split("for k0")[1][:400]
        (16, 512, False)
    """
    t = threads
    tile, count, half = tile_of(t), t * t, WIDTH * t
    stride = tile + PAD
    loads = tile * DEPTH // WIDTH // count  # 128-bit loads of each operand per thread per slab
    lines = prologue("vector", transpose_a, t, tile)
    lines += [
        f"    a_s = cuda.shared.array(({DEPTH}, {stride}), float32, alignment=16)  # op(a) slab, k-major",
        f"    b_s = cuda.shared.array(({DEPTH}, {stride}), float32, alignment=16)  # op(b) slab",
        f"    a_frag = ty * {WIDTH}",
        f"    b_frag = tx * {WIDTH}",
    ]
    a_plan, b_plan = _Plan(transpose_a, "a", "m", t, loads), _Plan(not transpose_b, "b", "n", t, loads)
    lines += a_plan.setup("    ", "row0")
    body = [f"    for col0 in range(cuda.blockIdx.y * {tile}, n, cuda.gridDim.y * {tile}):"]
    body += b_plan.setup("        ", "col0")
    body += [f"        c{i}_{j} = float32(0)" for i in range(PER_THREAD) for j in range(PER_THREAD)]
    body += a_plan.load("        ", "0") + b_plan.load("        ", "0")
    body += [f"        for k0 in range(0, k_total, {DEPTH}):"]
    body += a_plan.store("            ") + b_plan.store("            ")
    body += ["            cuda.syncthreads()", f"            if k0 + {DEPTH} < k_total:"]
    body += a_plan.load("                ", f"k0 + {DEPTH}") + b_plan.load(
        "                ", f"k0 + {DEPTH}"
    )
    for k in range(DEPTH):
        for name, frag in (("a", "a_frag"), ("b", "b_frag")):
            for q in range(2):
                values = ", ".join(f"{name}{4 * q + e}" for e in range(WIDTH))
                body.append(f"            {values} = load4({name}_s, {frag} + {k * stride + q * half})")
        body += [f"            c{i}_{j} += a{i} * b{j}" for i in range(PER_THREAD) for j in range(PER_THREAD)]
    body += ["            cuda.syncthreads()"]
    for i in range(PER_THREAD):
        body += [f"        row = row0 + a_frag + {(i // WIDTH) * half + i % WIDTH}", "        if row < m:"]
        for q in range(2):
            values = ", ".join(f"c{i}_{WIDTH * q + e}" for e in range(WIDTH))
            body += [
                f"            col = col0 + b_frag + {q * half}",
                "            if col < n:",
                f"                store4(c, row * n + col, {values})",
            ]
    return "\n".join(lines + body) + "\n"


@dataclass(frozen=True)
class _Plan:
    """How one operand's slab travels: which 4-float chunks a thread loads, from where, and where they go in
    shared memory. `along_tile`: the stored rows run along the tile's edge (op(a) transposed, op(b) not);
    else along k. `edge`: the kernel's name for the operand's size along the tile ("m" or "n")."""

    along_tile: bool
    name: str
    edge: str
    threads: int
    loads: int  # 128-bit loads per thread per slab

    def setup(self, indent: str, origin: str) -> list[str]:
        """Per-thread offsets of each chunk (at k = 0) from the tile's first row `origin`, rows past the edge
        clamped to the last one."""
        t, x, edge, out = self.threads, self.name, self.edge, []
        per_k_row = DEPTH // WIDTH  # chunks per stored row (along k)
        per_row = tile_of(t) // WIDTH  # chunks per stored row (along the tile)
        for p in range(self.loads):
            if self.along_tile:  # stored (K, edge): chunk (k, 4·e) of row k
                out += [
                    f"{indent}{x}_k{p} = tid // {per_row} + {p * t * t // per_row}",
                    f"{indent}{x}_i{p} = (tid % {per_row}) * {WIDTH}",
                    f"{indent}{x}_at{p} = min({origin} + {x}_i{p}, {edge} - {WIDTH})",
                    f"{indent}{x}_off{p} = {x}_k{p} * {edge} + {x}_at{p}",
                ]
            else:  # stored (edge, K): chunk (i, 4·e) of row i, DEPTH / 4 per row of the slab
                out += [
                    f"{indent}{x}_i{p} = tid // {per_k_row} + {p * t * t // per_k_row}",
                    f"{indent}{x}_k{p} = (tid % {per_k_row}) * {WIDTH}",
                    f"{indent}{x}_at{p} = min({origin} + {x}_i{p}, {edge} - 1)",
                    f"{indent}{x}_off{p} = {x}_at{p} * k_total + {x}_k{p}",
                ]
        return out

    def load(self, indent: str, k0: str) -> list[str]:
        """Registers r{x}{p}_0..3 <- the chunks of the slab at `k0` (zeros for a chunk past K)."""
        x, out = self.name, []
        step = f"({k0}) * {self.edge}" if self.along_tile else k0
        for p in range(self.loads):
            values = ", ".join(f"r{x}{p}_{e}" for e in range(WIDTH))
            out += [
                f"{indent}if {k0} + {x}_k{p} < k_total:",
                f"{indent}    {values} = load4({x}, {x}_off{p} + {step})",
                f"{indent}else:",
                f"{indent}    {' = '.join(f'r{x}{p}_{e}' for e in range(WIDTH))} = float32(0)",
            ]
        return out

    def store(self, indent: str) -> list[str]:
        """The registers into the shared slab, k-major: one vector store, or four along k."""
        x, out = self.name, []
        for p in range(self.loads):
            if self.along_tile:
                values = ", ".join(f"r{x}{p}_{e}" for e in range(WIDTH))
                out.append(
                    f"{indent}store4({x}_s, {x}_k{p} * {tile_of(self.threads) + PAD} + {x}_i{p}, {values})"
                )
            else:
                out += [f"{indent}{x}_s[{x}_k{p} + {e}, {x}_i{p}] = r{x}{p}_{e}" for e in range(WIDTH)]
        return out


@cache
def vector_kernel(transpose_a: bool, transpose_b: bool, threads: int) -> Any:
    """The compiled kernel for these transposes and T = `threads` (built once each per process; on a GPU
    cached on disk across processes)."""
    source = vector_source(transpose_a, transpose_b, threads)
    label = f"vector matmul {int(transpose_a)}{int(transpose_b)} T={threads}"
    simulated = {"load4": vector_access.simulated_load4, "store4": vector_access.simulated_store4}
    bounds = (threads * threads, BLOCKS_PER_SM)
    return compile_generated(source, "vector", label, bounds, _header(), simulated)


def _header() -> str:
    """Imports of the generated module, and the digest of the intrinsics' source it calls (numba's disk
    cache keys on the generated file alone: a changed intrinsic must change the file)."""
    digest = hashlib.sha256(Path(vector_access.__file__).read_bytes()).hexdigest()[:16]
    return (
        f"# load4/store4: workbench.kernels.vector_access {digest}\n"
        "from numba import cuda, float32\n\n"
        "from workbench.kernels.vector_access import gpu_intrinsics\n\n"
        "load4, store4 = gpu_intrinsics()\n\n\n"
    )
