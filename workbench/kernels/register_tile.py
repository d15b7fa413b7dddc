"""The register-tiled matmul kernel, written out as source for one shape of tile (2-D blocktiling).

A block of T×T threads computes a (T·R)×(T·R) tile of c; each thread keeps R×R sums in registers (scalar
variables: numba gives local arrays stack slots the compiler may not promote). Per step of depth D
(D = min(8, T²)) the block stages a (T·R)×D slab of op(a) and a D×(T·R) slab of op(b) in shared memory;
each thread then reads R values of each per k and does R² multiply-adds on them.

What makes it fast on a GPU, and why the source is generated rather than looped:

- every loop over k, R and the loads is unrolled: NVVM does not unroll numba's loops, and a loop counter,
  its compare and its branch would cost as much as the multiply-adds they drive;
- each thread's share of a slab is a fixed list of R·D/T loads at offsets known at compile time from one
  per-thread base (no division or modulo in the loop), coalesced along the stored rows;
- register prefetch: the next slab's global loads are issued before the current slab's math, so their
  latency hides behind it; shared memory then holds one slab (two barriers per step);
- thread (ty, tx) owns rows ty + r·T and columns tx + c·T: in a warp, reads of b's slab hit 16 (or 32)
  consecutive words (no bank conflicts), reads of a's slab are broadcasts, and writes of c are coalesced;
- shared rows are padded by 4 floats, so the stores of a transposed slab spread over the banks;
- launch bounds (T² threads, `BLOCKS_PER_SM` = 1) let ptxas keep everything in registers: no spills.

`workbench.kernels.gemm.matmul(method="register")` launches it; `matmul_spec` is the reference the tests
hold it to. `register_source(False, False, 2, 2)` shows a small one.

On a GPU each variant's source is written to a file in the kernel cache folder (`kernel_cache_folder`:
``$WORKBENCH_KERNEL_CACHE``, else ``~/.cache/workbench/kernels``) and compiled with numba's file cache, so
only the first process on a machine pays the compile (15-19 s for T=16, R=8); later processes and every
rank load the cached code. The simulator compiles nothing and runs the source as it is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from workbench._cache import cache_folder
from workbench.kernels._numba import bind_cuda, jit_kernel, on_simulator

CACHE_VARIABLE = "WORKBENCH_KERNEL_CACHE"

PAD = 4  # floats added to each shared row
# Resident blocks per SM the launch bounds ask ptxas to leave registers for. One: at T=16, R=8 the 64 sums,
# the prefetched slab and the load addresses take 200-255 registers (two blocks would cap them at 128 and
# spill, measured with `python -m workbench.kernels.static`); one block's 8 warps keep the FMA units busy
# through 64 independent sums per thread, and the prefetch hides the global loads.
BLOCKS_PER_SM = 1


def slab_depth(threads: int) -> int:
    """D, the k-depth of a shared slab: 8, or T² when a block has fewer than 8 threads."""
    return min(8, threads * threads)


def loads_per_thread(threads: int, per_thread: int) -> float:
    """Elements of each slab one thread loads: (T·R)·D / T²."""
    return threads * per_thread * slab_depth(threads) / (threads * threads)


def _split(p: int, count: int, length: int) -> tuple[str, str]:
    """For element e = tid + p·count of a slab whose contiguous dimension has `length` elements: the
    (fast, slow) coordinates as source, each a per-thread base plus a constant (all sizes powers of two)."""
    offset = p * count
    if count >= length:  # whole rows per pass: the fast coordinate is fixed per thread
        return "fast_base", f"slow_base + {offset // length}"
    return f"tid + {offset % length}", f"{offset // length}"  # a pass covers part of a row


def register_source(transpose_a: bool, transpose_b: bool, threads: int, per_thread: int) -> str:
    """Python source of the kernel ``register(a, b, c)`` for T = `threads`, R = `per_thread`.

    Example:
        >>> source = register_source(False, False, 2, 2)
        >>> source.count("+= a"), "while" in source
        (16, False)
    """
    t, r = threads, per_thread
    tile, depth, count = t * r, slab_depth(t), t * t
    loads = round(loads_per_thread(t, r))
    lines = prologue("register", transpose_a, t, tile)
    lines += [
        f"    a_s = cuda.shared.array(({depth}, {tile + PAD}), float32)  # [k, i]: op(a)[row0 + i, k0 + k]",
        f"    b_s = cuda.shared.array(({depth}, {tile + PAD}), float32)  # [k, j]: op(b)[k0 + k, col0 + j]",
    ]
    # each thread's slab coordinates: fast along the stored rows (coalesced), slow across them
    a_length = tile if transpose_a else depth  # a stored (K, M): rows run along i; (M, K): along k
    b_length = depth if transpose_b else tile  # b stored (N, K): rows run along k; (K, N): along j
    lines += [
        f"    a_fast_base = tid % {a_length}",
        f"    a_slow_base = tid // {a_length}",
        f"    b_fast_base = tid % {b_length}",
        f"    b_slow_base = tid // {b_length}",
    ]
    a_coords, b_coords = [], []  # (i, k) and (k, j) of each load, within the slab
    for p in range(loads):
        fast, slow = _split(p, count, a_length)
        fast, slow = fast.replace("fast_base", "a_fast_base"), slow.replace("slow_base", "a_slow_base")
        a_coords.append((fast, slow) if transpose_a else (slow, fast))  # (i, k)
        fast, slow = _split(p, count, b_length)
        fast, slow = fast.replace("fast_base", "b_fast_base"), slow.replace("slow_base", "b_slow_base")
        b_coords.append((fast, slow) if transpose_b else (slow, fast))  # (k, j)
    for p, (i, k) in enumerate(a_coords):
        lines += [f"    a_i{p} = {i}", f"    a_k{p} = {k}"]
    for p, (k, j) in enumerate(b_coords):
        lines += [f"    b_k{p} = {k}", f"    b_j{p} = {j}"]

    def load_slab(indent: str, k0: str) -> list[str]:
        out = []
        for p in range(loads):
            row, col = f"row0 + a_i{p}", f"{k0} + a_k{p}"
            element = f"a[{col}, {row}]" if transpose_a else f"a[{row}, {col}]"
            out.append(f"{indent}ra{p} = {element} if {row} < m and {col} < k_total else float32(0)")
            k, j = f"{k0} + b_k{p}", f"col0 + b_j{p}"
            element = f"b[{j}, {k}]" if transpose_b else f"b[{k}, {j}]"
            out.append(f"{indent}rb{p} = {element} if {k} < k_total and {j} < n else float32(0)")
        return out

    body = [f"    for col0 in range(cuda.blockIdx.y * {tile}, n, cuda.gridDim.y * {tile}):"]
    body += [f"        c{i}_{j} = float32(0)" for i in range(r) for j in range(r)]
    body += load_slab("        ", "0")
    body += [f"        for k0 in range(0, k_total, {depth}):"]
    body += [f"            a_s[a_k{p}, a_i{p}] = ra{p}" for p in range(loads)]
    body += [f"            b_s[b_k{p}, b_j{p}] = rb{p}" for p in range(loads)]
    body += ["            cuda.syncthreads()", f"            if k0 + {depth} < k_total:"]
    body += load_slab("                ", f"k0 + {depth}")
    for k in range(depth):
        body += [f"            a{i} = a_s[{k}, ty + {i * t}]" for i in range(r)]
        body += [f"            b{j} = b_s[{k}, tx + {j * t}]" for j in range(r)]
        body += [f"            c{i}_{j} += a{i} * b{j}" for i in range(r) for j in range(r)]
    body += ["            cuda.syncthreads()"]
    for i in range(r):
        body += [f"        row = row0 + ty + {i * t}", "        if row < m:"]
        for j in range(r):
            body += [
                f"            col = col0 + tx + {j * t}",
                "            if col < n:",
                f"                c[row, col] = c{i}_{j}",
            ]
    return "\n".join(lines + body) + "\n"


@cache
def register_kernel(transpose_a: bool, transpose_b: bool, threads: int, per_thread: int) -> Any:
    """The compiled kernel for these transposes and T = `threads`, R = `per_thread` (built once each per
    process; on a GPU cached on disk across processes, see the module docstring)."""
    source = register_source(transpose_a, transpose_b, threads, per_thread)
    label = f"register matmul {int(transpose_a)}{int(transpose_b)} T={threads} R={per_thread}"
    return compile_generated(source, "register", label, (threads * threads, BLOCKS_PER_SM), _HEADER, {})


_HEADER = "from numba import cuda, float32\n\n\n"


def prologue(name: str, transpose_a: bool, threads: int, tile: int) -> list[str]:
    """The first lines of a generated matmul kernel ``name(a, b, c)``: the sizes, the thread's indices and the
    first row of its block's tile."""
    return [
        f"def {name}(a, b, c):",
        "    m, n = c.shape",
        f"    k_total = a.shape[{0 if transpose_a else 1}]",
        "    tx = cuda.threadIdx.x",
        "    ty = cuda.threadIdx.y",
        f"    tid = ty * {threads} + tx",
        f"    row0 = cuda.blockIdx.x * {tile}",
    ]


def compile_generated(
    source: str, name: str, label: str, bounds: tuple[int, int], header: str, simulated: dict[str, Any]
) -> Any:
    """The kernel `name` that `source` defines, with launch bounds `bounds`. On the simulator: `source` run
    as Python with `simulated` (the simulator's stand-ins for what `header` imports) and numba's simulated
    ``cuda`` and ``float32``. On a GPU: ``header + source`` as a module in the kernel cache folder
    (`source_module`), jitted with numba's disk cache."""
    if on_simulator():
        namespace = dict(simulated)
        bind_cuda(namespace)
        from numba import float32

        namespace["float32"] = float32
        exec(compile(source, f"<workbench {label}>", "exec"), namespace)
        return jit_kernel(launch_bounds=bounds)(namespace[name])
    module = source_module(header + source, f"{name}_matmul")
    from numba import cuda

    return cuda.jit(launch_bounds=bounds, cache=True)(getattr(module, name))


def kernel_cache_folder() -> Path:
    """Where generated kernels and numba's cache of them live: ``$WORKBENCH_KERNEL_CACHE``, else
    ``$XDG_CACHE_HOME/workbench/kernels`` (``~/.cache/workbench/kernels``).

    Example:
        >>> kernel_cache_folder().name
        'kernels'
    """
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    return cache_folder("kernels")


def source_module(source: str, stem: str) -> Any:
    """`source` as an imported module backed by a file named after its hash (written once, atomically, so
    numba's cache, keyed by the file's time stamp, stays valid across processes and concurrent ranks)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = kernel_cache_folder()
    path = folder / f"{stem}_{digest}.py"
    if not path.exists() or path.read_text() != source:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as file:
            file.write(source)
        os.replace(file.name, path)
    spec = importlib.util.spec_from_file_location(f"workbench_{stem}_{digest}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
