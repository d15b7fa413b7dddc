"""What NVIDIA's compiler makes of every kernel the package launches, without a GPU: registers, spills,
shared memory, float64 use, occupancy on A100 (sm_80) and H100 (sm_90), and the SASS instruction mix.

    python -m workbench.kernels.static             # a table, every kernel for sm_80 and sm_90
    python -m workbench.kernels.static --json      # the same as JSON (what the tests read)

Each kernel is compiled as the host code launches it (`workbench.kernels.targets`): numba's
``compile_ptx`` with the exact argument types (PTX for sm_80, which later GPUs also run), then ``ptxas -v``
for each architecture's SASS and its resource use, then ``nvdisasm`` for the instructions. `problems`
lists what would fail or disappoint on the hardware: local memory spills, float64 in an fp32 kernel, a
block that cannot launch with its registers or shared memory, a block that is not whole warps, fewer
resident blocks than the launch counts on.

Needs NVIDIA's compiler from pip (``make test`` installs it: the ``toolchain`` extra) and numba on its GPU
target: this runs with ``NUMBA_ENABLE_CUDASIM=0`` (in a subprocess when this process already chose the
simulator; `static_reports` does that). No GPU or driver is needed to compile.

Compiling takes about a minute (numba's compile of the four register matmuls is most of it), so
`static_reports` splits the kernels over two processes and each report is kept in
``$XDG_CACHE_HOME/workbench/kernel-reports`` (``~/.cache/...``) under a digest of everything that decides it:
the source of every module in ``workbench/kernels``, the kernel's name, signature and launch, the
architecture, and the versions of numba and of the toolchain's packages. Any change to those compiles again;
``--no-cache`` (``cache=False``) always does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from workbench._cache import cache_folder
from workbench.devices.toolchain import TOOLCHAIN_EXTRA, toolchain_status
from workbench.kernels.sass import base_opcode, ffma_share, main_loop_mix, sass_instructions
from workbench.kernels.targets import KernelTarget

ARCHS = ("sm_80", "sm_90")
STATIC_SHARED_BYTES = 48 * 1024  # what a kernel may declare statically (numba's shared arrays are static)


def all_targets() -> list[KernelTarget]:
    """The targets of every kernel module (importing them imports no numba).

    Example:
        >>> names = [target.name for target in all_targets()]
        >>> "matmul register" in names and "adam" in names
        True
    """
    from workbench.kernels import clip, gemm, optim_kernels, reduce, softmax_xent

    modules = (gemm, reduce, clip, optim_kernels, softmax_xent)
    return [target for module in modules for target in module.gpu_targets()]


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one compute capability (CUDA C Programming Guide, compute capabilities table)."""

    gpu: str
    max_threads: int = 2048
    max_blocks: int = 32
    registers: int = 65_536
    register_unit: int = 256  # registers are allocated per warp in units of this many
    sub_partitions: int = 4  # the register file is split between them; a warp's registers come from one
    shared_per_sm: int = 0  # bytes usable by blocks
    shared_reserved: int = 1024  # bytes the system keeps per resident block


LIMITS = {
    "sm_80": SmLimits("A100", shared_per_sm=164 * 1024),
    "sm_90": SmLimits("H100", shared_per_sm=228 * 1024),
}


@dataclass(frozen=True)
class KernelReport:
    """One kernel compiled for one architecture."""

    name: str
    arch: str
    threads: int
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    float64: bool  # float64 instructions in the PTX
    blocks_per_sm: int  # resident blocks per SM at this launch (0: cannot launch)
    occupancy: float  # resident warps / the SM's maximum
    instructions: int  # SASS instructions (static count)
    ffma_share: float  # FFMA / instructions in the loop with the most FFMAs (0 without FFMA)
    opcodes: dict[str, int] = field(default_factory=dict)  # SASS opcode → static count
    # that loop's instructions by opcode, memory accesses with their width in bits ("LDS.128", "LDG.32")
    main_loop: dict[str, int] = field(default_factory=dict)

    @property
    def launchable(self) -> bool:
        return self.blocks_per_sm > 0


def occupancy(registers: int, threads: int, shared_bytes: int, limits: SmLimits) -> tuple[int, float]:
    """(resident blocks per SM, resident warps / maximum) for a kernel's resources.

    Registers as NVIDIA's occupancy calculator counts them (``cudaOccMaxBlocksPerSMRegsLimit`` in
    cuda_occupancy.h): each warp takes its threads' registers rounded up to `register_unit`, all from one of
    the SM's `sub_partitions` (a quarter of the register file each), so a sub-partition holds
    ⌊16,384 / registers per warp⌋ warps; 33 registers × 64 threads: 24 blocks, not the 25 that pooling the
    whole file would give.

    Example:
        >>> occupancy(124, 256, 8320, LIMITS["sm_90"])  # 124 registers × 256 threads: 2 blocks fit
        (2, 0.25)
        >>> occupancy(94, 1024, 16640, LIMITS["sm_90"])  # 94 × 1024 > 65,536 registers: cannot launch
        (0, 0.0)
    """
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(max(registers, 1) * 32 / limits.register_unit) * limits.register_unit
    warps_by_registers = limits.registers // limits.sub_partitions // per_warp * limits.sub_partitions
    by_registers = warps_by_registers // warps
    by_shared = limits.shared_per_sm // max(shared_bytes + limits.shared_reserved, 1)
    by_threads = limits.max_threads // threads if threads <= 1024 else 0
    blocks = min(by_registers, by_shared, by_threads, limits.max_blocks)
    return blocks, blocks * warps / (limits.max_threads // 32)


def problems(report: KernelReport, target: KernelTarget) -> list[str]:
    """What would fail or disappoint on the hardware; empty when the kernel is as its launch expects."""
    found = []
    if report.spill_stores or report.spill_loads or report.stack_bytes:
        found.append(
            f"local memory: {report.stack_bytes} bytes of stack, {report.spill_stores} bytes of spill "
            f"stores, {report.spill_loads} of spill loads"
        )
    if target.fp32 and report.float64:
        found.append("float64 instructions in an fp32 kernel")
    if report.threads % 32:
        found.append(f"{report.threads} threads per block is not a whole number of warps (32)")
    if report.shared_bytes > STATIC_SHARED_BYTES:
        found.append(f"{report.shared_bytes} bytes of static shared memory; at most {STATIC_SHARED_BYTES}")
    if not report.launchable:
        found.append(
            f"cannot launch: {report.registers} registers × {report.threads} threads and "
            f"{report.shared_bytes} bytes of shared memory do not fit one SM of {LIMITS[report.arch].gpu}"
        )
    elif report.blocks_per_sm < target.min_blocks_per_sm:
        found.append(
            f"{report.blocks_per_sm} resident block(s) per SM ({report.occupancy:.0%} occupancy); the launch "
            f"counts on {target.min_blocks_per_sm}"
        )
    return found


# ---------------------------------------------------------------------------------------------- compiling


def find_tool(name: str) -> str | None:
    """The path of NVIDIA's `name` (ptxas, nvdisasm) from the pip toolchain or a CUDA install, or None."""
    return toolchain_status().tools.get(name)


def target_ptx(target: KernelTarget, arch: str = "sm_80") -> str:
    """numba's PTX for `target` with the launch's exact argument types, for `arch` (PTX for sm_80 also
    assembles for every later architecture, as a driver does when it meets a newer GPU)."""
    from numba import cuda

    if cuda.config.ENABLE_CUDASIM:
        raise RuntimeError(
            "numba runs on its CPU simulator in this process, which compiles nothing; run "
            "`python -m workbench.kernels.static` (it sets NUMBA_ENABLE_CUDASIM=0) or call static_reports()"
        )
    dispatcher = target.build()
    options = {
        k: dispatcher.targetoptions[k] for k in ("fastmath", "launch_bounds") if k in dispatcher.targetoptions
    }
    cc = (int(arch[3]), int(arch[4:]))
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, target.signature, cc=cc, **options)
    return ptx


def compile_target(
    target: KernelTarget, arch: str, *, ptx: str | None = None, max_registers: int | None = None
) -> KernelReport:
    """Assemble `target` for `arch` (``"sm_80"``, ``"sm_90"``) and read what the compiler did.

    `ptx`: from `target_ptx` (compiled here when not given). `max_registers` caps ptxas's registers per
    thread (ptxas ignores it for kernels with launch bounds); tests use it to make a kernel spill. Needs
    numba on its GPU target (``NUMBA_ENABLE_CUDASIM=0``) and the toolchain.
    """
    tools = toolchain_status().tools
    ptxas, nvdisasm = tools["ptxas"], tools["nvdisasm"]
    if ptxas is None or nvdisasm is None:
        raise RuntimeError(f"ptxas or nvdisasm not found; install NVIDIA's toolchain: {TOOLCHAIN_EXTRA}")
    if ptx is None:
        ptx = target_ptx(target)
    with tempfile.TemporaryDirectory(prefix="workbench-static-") as folder:
        source, cubin = Path(folder) / "kernel.ptx", Path(folder) / "kernel.cubin"
        source.write_text(ptx)
        command = [ptxas, "-v", f"-arch={arch}", str(source), "-o", str(cubin)]
        if max_registers is not None:
            command.append(f"--maxrregcount={max_registers}")
        verbose = subprocess.run(command, capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    resources = _ptxas_resources(verbose)
    instructions = sass_instructions(sass)
    loop = main_loop_mix(instructions)
    blocks, fraction = occupancy(resources["registers"], target.threads, resources["shared"], LIMITS[arch])
    return KernelReport(
        name=target.name,
        arch=arch,
        threads=target.threads,
        registers=resources["registers"],
        stack_bytes=resources["stack"],
        spill_stores=resources["spill_stores"],
        spill_loads=resources["spill_loads"],
        shared_bytes=resources["shared"],
        float64=re.search(r"\.f64\b", ptx) is not None,
        blocks_per_sm=blocks,
        occupancy=fraction,
        instructions=len(instructions),
        ffma_share=ffma_share(loop),
        main_loop=dict(Counter(loop).most_common()),
        opcodes=dict(Counter(base_opcode(opcode) for _, opcode, _ in instructions).most_common()),
    )


def _ptxas_resources(verbose: str) -> dict[str, int]:
    """Registers, stack, spills and shared memory from ``ptxas -v`` (one kernel)."""

    def number(pattern: str) -> int:
        found = re.search(pattern, verbose)
        return int(found.group(1)) if found else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "stack": number(r"(\d+) bytes stack frame"),
        "spill_stores": number(r"(\d+) bytes spill stores"),
        "spill_loads": number(r"(\d+) bytes spill loads"),
        "shared": number(r"(\d+) bytes smem"),
    }


# ---------------------------------------------------------------------------------------------- running


def static_reports(
    archs: tuple[str, ...] = ARCHS, kernels: tuple[str, ...] = (), timeout_s: float = 900, cache: bool = True
) -> list[dict[str, Any]]:
    """Every target (or those named in `kernels`) compiled for each of `archs`, as dicts with a
    ``problems`` list, from fresh processes with numba on its GPU target (so this works from any process,
    the simulator's included): two of them when there are two cores, each compiling half the kernels.
    `cache`: reuse reports compiled before from the same sources and tools (see the module's docstring).

    Raises:
        RuntimeError: the toolchain is missing or a compile failed (the message says which and the fix).
    """
    names = list(kernels) or [t.name for t in all_targets()]
    workers = max(1, min(2, len(os.sched_getaffinity(0)), len(names)))
    shares = [names[i::workers] for i in range(workers)]
    environment = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}

    def run(share: list[str]) -> list[dict[str, Any]]:
        command = [sys.executable, "-m", "workbench.kernels.static", "--json", "--arch", *archs]
        command += [word for name in share for word in ("--kernel", name)]
        command += [] if cache else ["--no-cache"]
        done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"compiling the kernels failed:\n{done.stderr.strip()[-3000:]}")
        return json.loads(done.stdout)

    with ThreadPoolExecutor(workers) as pool:
        by_share = list(pool.map(run, shares))
    order = {name: i for i, name in enumerate(names)}
    return sorted((row for rows in by_share for row in rows), key=lambda r: (order[r["name"]], r["arch"]))


def reports_cache() -> Path:
    """Where compiled reports are kept: ``$XDG_CACHE_HOME/workbench/kernel-reports`` (``~/.cache/…``)."""
    return cache_folder("kernel-reports")


@cache
def _sources_and_tools() -> str:
    """A digest of what every report depends on besides its target: the kernels' sources, numba, the tools."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    for package in ("numba", "numba-cuda", *toolchain_status().packages):
        try:
            digest.update(f"{package}={version(package)}".encode())
        except PackageNotFoundError:
            digest.update(f"{package}=none".encode())
    return digest.hexdigest()


def _cache_path(target: KernelTarget, arch: str) -> Path:
    key = (
        f"{_sources_and_tools()}|{target.name}|{target.signature}|{target.threads}|{target.min_blocks_per_sm}"
    )
    return reports_cache() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}-{arch}.json"


def _cached_reports(target: KernelTarget, archs: list[str], use_cache: bool) -> list[KernelReport]:
    """`target`'s reports for `archs`, from the cache when every one is there, else compiled (and kept)."""
    paths = [_cache_path(target, arch) for arch in archs]
    if use_cache and all(path.is_file() for path in paths):
        try:
            return [KernelReport(**json.loads(path.read_text())) for path in paths]
        except (OSError, ValueError, TypeError):  # unreadable or from another layout: compile again
            pass
    ptx = target_ptx(target)  # once: numba's compile is the slow part (seconds for the register matmul)
    reports = [compile_target(target, arch, ptx=ptx) for arch in archs]
    for path, report in zip(paths, reports, strict=True):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(asdict(report)))
            temporary.replace(path)  # whole or absent, whatever runs beside this
        except OSError:  # a read-only home: compile every time
            pass
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.kernels.static", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="print JSON (one object per kernel and arch)")
    parser.add_argument("--arch", nargs="+", default=list(ARCHS), choices=ARCHS)
    parser.add_argument("--kernel", action="append", default=[], help="only this kernel (repeatable)")
    parser.add_argument("--no-cache", action="store_true", help="compile again even if reports are cached")
    args = parser.parse_args(argv)
    targets = [t for t in all_targets() if not args.kernel or t.name in args.kernel]
    unknown = set(args.kernel) - {t.name for t in targets}
    if unknown:
        known = ", ".join(t.name for t in all_targets())
        parser.error(f"--kernel {sorted(unknown)[0]!r} is not a kernel; known: {known}")
    if "numba.cuda" not in sys.modules:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    rows = []
    for target in targets:
        for report in _cached_reports(target, args.arch, use_cache=not args.no_cache):
            rows.append(
                {**asdict(report), "launchable": report.launchable, "problems": problems(report, target)}
            )
    if args.json:
        print(json.dumps(rows))
        return 0
    from workbench.tables import text_table

    headers = [
        "kernel",
        "arch",
        "threads",
        "regs",
        "smem B",
        "spill B",
        "blocks/SM",
        "occupancy",
        "FFMA share",
    ]
    table = [
        [
            r["name"],
            r["arch"],
            r["threads"],
            r["registers"],
            r["shared_bytes"],
            r["spill_stores"] + r["spill_loads"],
            r["blocks_per_sm"],
            f"{r['occupancy']:.0%}",
            f"{r['ffma_share']:.0%}" if r["ffma_share"] else "-",
        ]
        for r in rows
    ]
    print(text_table(headers, table))
    for r in rows:
        for problem in r["problems"]:
            print(f"{r['name']} ({r['arch']}): {problem}")
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
