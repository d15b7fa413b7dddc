"""One offline command that checks every GPU path and writes its report: ``workbench gpu-check``.

    workbench gpu-check                 # run the plan within 6 minutes, write docs/gpu/<gpu>.md and .json
    workbench gpu-check --plan          # print what would run and its time budget; runs nothing
    workbench gpu-check --budget 300 --out /tmp/report

The steps, in order, each with the seconds it is planned at; the plan takes them while the budget lasts
and the report lists the others as not run, with why:

- ``gpu tests``: pytest of tests/gpu (the ``gpu`` marker) and tests/kernels (every kernel against its
  NumPy spec, on the device), in a child process; each failure is a failed check, named;
- ``fsdp on this torch``: the FSDP and collective tests (tests/parallel) on the torch installed here;
- ``hardware``: the device's measured copy bandwidth and cuBLAS fp32 matmul rate;
- ``kernels``: `workbench bench kernels --full` rows, each against its torch counterpart and the target
  of the kernels issue (matmul ≥ 0.75×, optimizers ≥ 1.0×, cross-entropy ≥ 0.8×, reductions ≥ 0.9×);
- ``launch cost``: host µs of one kernel call from torch tensors over a bare numba launch (≤ 15);
- ``trainer``: the Trainer against a hand-written loop with the same fused Adam on CUDA (≤ 1.02×);
- ``precision and compile``: bf16 autocast against fp32 (TF32 off, ≥ 2×) and torch.compile against
  eager (≥ 1.3×, compile time apart), on the same model;
- ``dashboard``: the Trainer with a live Dashboard against the Trainer alone (≤ 1.02×);
- ``input paths``: digits epochs from a device-resident dataset against per-batch copies from pageable
  memory (≥ 3×), and a DataLoader's data wait through the pinned prefetch (≤ 5% of a step);
- ``peers``: the Trainer against Lightning, Fabric and Accelerate loops (``bench trainer --peers`` on the
  GPU; ≤ 1.0× each peer's median), with the hand-written loop's time as the floor;
- ``notebooks``: nbval of notebooks 01, 03, 05, 06 and 09 at their full sizes (``WORKBENCH_QUICK=0``), on
  this Python's kernel (planned beyond the 6-minute budget: ``--budget 900`` or ``--steps notebooks``).

Without a CUDA GPU it says so in one line and runs nothing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench._validate import check_int
from workbench.bench.failure_lines import failure_line
from workbench.bench.gpu_report import Check, GpuReport, at_least, at_most, failed, reported
from workbench.tables import text_table

DEFAULT_BUDGET_S = 360  # the issue's ≤ 6 minutes on an H100-class GPU
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Step:
    """One part of the check: its name, planned seconds, and what it runs (returning its checks)."""

    name: str
    seconds: float
    run: Callable[[], list[Check]]
    needs: str = ""  # a path under the repository the step needs (the tests), if any


def _run_in_own_session(command: list[str], env: dict[str, str], timeout: float) -> tuple[str, bool]:
    """Run `command` in a process group of its own; past `timeout` the whole group (workers the tests
    started too) is killed. Its output, and whether it timed out."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        return process.communicate(timeout=timeout)[0], False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()[0], True


def _pytest_checks(name: str, args: list[str], timeout: float, **env_vars: str) -> list[Check]:
    """Run pytest in a child process; one check for the counts, one failed check per failed test."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONUNBUFFERED": "1", **env_vars}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *args,
        ]
        output, timed_out = _run_in_own_session(command, env, timeout)
        if timed_out:
            return [failed(name, f"pytest ran past {timeout:.0f} s and was stopped: {output.strip()[-300:]}")]
        if not junit.exists():
            return [failed(name, output.strip()[-400:])]
        cases = ElementTree.parse(junit).getroot().iter("testcase")
        outcome = {"passed": 0, "failed": 0, "skipped": 0}
        failures: list[Check] = []
        for case in cases:
            problem = case.find("failure")
            problem = problem if problem is not None else case.find("error")
            if problem is not None:
                outcome["failed"] += 1
                message = failure_line(problem.get("message") or "", problem.text or "")
                failures.append(failed(f"{name}: {case.get('name')}", message))
            elif case.find("skipped") is not None:
                outcome["skipped"] += 1
            else:
                outcome["passed"] += 1
    detail = f"{outcome['passed']} passed, {outcome['failed']} failed, {outcome['skipped']} skipped"
    summary = Check(name, outcome["failed"], "failed tests", "", "== 0", outcome["failed"] == 0, detail)
    return [summary, *failures]


def parallel_args(workers: int, scheduling: str = "loadfile") -> list[str]:
    """pytest-xdist's arguments for `workers` processes (one file's tests stay on one worker, in order), or
    none where xdist is not installed: the kernels compile on the CPU, in every process, so on a machine
    with cores to spare the workers share the compiling (the GPU is shared; the tests time nothing).

    Example:
        >>> parallel_args(1)
        []
    """
    if workers <= 1 or importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", str(workers), "--dist", scheduling]


def _workers(most: int) -> int:
    return max(1, min(most, (os.cpu_count() or 1) // 2))


def _gpu_tests() -> list[Check]:
    args = ["tests/gpu", "tests/kernels", *parallel_args(_workers(8))]
    return _pytest_checks("gpu tests", args, timeout=300)


def _fsdp_tests() -> list[Check]:
    files = ("test_collective_times", "test_model_parallel", "test_your_data_parallel", "test_step_time")
    args = [f"tests/parallel/{name}.py" for name in files] + ["-k", "fsdp or collectives or sharded"]
    return _pytest_checks("fsdp on this torch", args, timeout=150)


def _doctor() -> list[Check]:
    """numba's PTX against what the driver loads (the doctor's rule), and a one-line kernel run."""
    from workbench.devices.cuda import cuda_status
    from workbench.devices.toolchain import ptx_driver_problem

    status = cuda_status()
    driver = environment_driver_cuda()
    problem = ptx_driver_problem(status.ptx_version, driver)
    ptx = status.ptx_version or "unknown"
    ptx_check = Check(
        "numba PTX loads on this driver", None, "", f"driver for CUDA {driver}", "PTX <= driver's",
        problem is None and status.ptx_version is not None, problem or f"PTX {ptx}",
    )  # fmt: skip
    ran = status.kernel_error is None and bool(status.numba_devices)
    detail = status.kernel_error or status.error or ", ".join(status.numba_devices)
    return [ptx_check, Check("numba kernel compiles and runs", None, "", "", "runs", ran, detail)]


def environment_driver_cuda() -> str | None:
    """The CUDA version the driver supports (NVML), or None."""
    from workbench.devices.nvml import nvml_report

    report = nvml_report()
    return report.cuda_driver_version if report.available else None


GPU_NOTEBOOKS = ("01_gpu_kernels", "03_data_parallel", "05_mixed_precision", "06_hardware_and_estimates",
                 "09_where_the_time_goes")  # fmt: skip


NBVAL_ARGS = ("--nbval-lax", "--nbval-current-env", "-p", "workbench.bench.nbval_stderr")  # + cells' stderr


def _notebooks() -> list[Check]:
    """The tutorials whose GPU paths matter, by nbval at their full (GPU) sizes on this Python's kernel."""
    paths = [f"notebooks/{name}.ipynb" for name in GPU_NOTEBOOKS]
    args = [*NBVAL_ARGS, *paths, *parallel_args(_workers(len(paths)))]
    return _pytest_checks("notebooks", args, timeout=900, WORKBENCH_QUICK="0")


def _hardware() -> list[Check]:
    from workbench.devices.microbench import benchmark_hardware

    result = benchmark_hardware(repeats=10, quick=False, device="cuda")
    return [reported(m.name, m.value, m.unit, detail=m.detail) for m in result.measurements]


_KERNEL_TARGETS = {  # row name prefix → (floor of ours/torch, the kernels issue's target)
    "matmul": 0.75,
    "Adam": 1.0,
    "SGD": 1.0,
    "softmax": 0.8,
    "sum": 0.9,
    "squared": 0.9,
}


def _kernels() -> list[Check]:
    from workbench.bench.kernels import benchmark_kernels

    result = benchmark_kernels(quick=False, repeats=20)
    if result.reason is not None:
        return [failed("kernels", result.reason)]
    checks = []
    for row in result.rows:
        floor = next((v for key, v in _KERNEL_TARGETS.items() if row.name.startswith(key)), None)
        name = f"{row.name} {row.size}"
        share = "" if row.of_peak is None else f"{row.ours:,.0f} {row.unit}, {100 * row.of_peak:.0f}% of peak"
        if floor is None:
            checks.append(reported(name, row.ratio, "× torch", row.counterpart, share))
        else:
            checks.append(at_least(name, row.ratio, "× torch", row.counterpart, floor, share))
    return checks


def _launch_cost() -> list[Check]:
    from workbench.bench import launch_cost

    result = launch_cost.benchmark_launch_cost()
    if result.reason is not None:
        return [failed("launch cost", result.reason)]
    variants = (launch_cost.BARE, launch_cost.DIRECT, launch_cost.DISPATCHER)
    bare, direct, numba = (result.micros[variant][0] for variant in variants)
    detail = f"bare {bare:.1f} µs, direct {direct:.1f} µs, numba's dispatcher {numba:.1f} µs"
    name = "host cost of one kernel call from torch tensors"
    ceiling = launch_cost.TARGET_OVER_BARE_US
    return [at_most(name, result.over_bare(), "µs", "over a bare numba launch", ceiling, detail)]


def _training(measurement: str) -> Callable[[], list[Check]]:
    """The `workbench.bench.gpu_training` function called `measurement`, imported when the step runs."""

    def run() -> list[Check]:
        from workbench.bench import gpu_training

        return getattr(gpu_training, measurement)()

    return run


def default_steps() -> list[Step]:
    """The steps of the check, in the order they run, with their planned seconds: as measured on an H100
    (2026-11-26, runs 3 and 4 in docs/gpu/raw; gpu tests with an empty kernel cache on 8 xdist workers)."""
    return [
        Step("doctor", 10, _doctor),
        Step("gpu tests", 130, _gpu_tests, needs="tests/gpu"),
        Step("fsdp on this torch", 85, _fsdp_tests, needs="tests/parallel"),
        Step("hardware", 20, _hardware),
        Step("kernels", 60, _kernels),
        Step("launch cost", 5, _launch_cost),
        Step("trainer", 15, _training("trainer_against_hand_loop")),
        Step("precision and compile", 50, _training("precision_and_compile")),
        Step("dashboard", 15, _training("dashboard_overhead")),
        Step("input paths", 10, _training("input_paths")),
        Step("peers", 45, _training("peers")),
        Step("notebooks", 300, _notebooks, needs="notebooks"),
    ]


def only(names: list[str], steps: list[Step] | None = None) -> list[Step]:
    """The steps called `names` (in the plan's order); ValueError naming an unknown one and the known."""
    steps = default_steps() if steps is None else steps
    known = [step.name for step in steps]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--steps {unknown[0]!r} is not a step; the steps: {', '.join(map(repr, known))}")
    return [step for step in steps if step.name in names]


def plan(
    budget_s: float, steps: list[Step] | None = None, repo: Path = REPO
) -> tuple[list[Step], list[tuple[str, str]]]:
    """The steps that fit in `budget_s` (in order, each at its planned seconds), and the others with why."""
    chosen: list[Step] = []
    left_out: list[tuple[str, str]] = []
    spent = 0.0
    for step in default_steps() if steps is None else steps:
        if step.needs and not (repo / step.needs).exists():
            left_out.append((step.name, f"needs {step.needs} of a workbench checkout; run from one"))
        elif spent + step.seconds > budget_s:
            left_out.append((step.name, f"planned at {step.seconds:.0f} s, over the {budget_s:.0f} s budget"))
        else:
            chosen.append(step)
            spent += step.seconds
    return chosen, left_out


def environment() -> dict[str, str]:
    """GPU name, driver, CUDA, torch, numba, numba-cuda, Python and the date."""
    import torch

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    env = {"date": datetime.date.today().isoformat()}
    env["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    env["driver"] = _driver_version()
    env["cuda (torch)"] = str(torch.version.cuda)
    env["torch"] = torch.__version__
    env["numba"] = version("numba")
    env["numba-cuda"] = version("numba-cuda")
    env["python"] = platform.python_version()
    return env


def _driver_version() -> str:
    from workbench.devices.nvml import nvml_report

    report = nvml_report()
    if not report.available:
        return f"unknown ({report.error})"
    return f"{report.driver_version} (CUDA {report.cuda_driver_version})"


def run_check(
    budget_s: float = DEFAULT_BUDGET_S,
    steps: list[Step] | None = None,
    echo: Callable[[str], None] = print,
    on_step: Callable[[GpuReport], None] | None = None,
) -> GpuReport:
    """Run the planned steps (a step's error becomes a failed check) and return the report; `on_step` gets
    the report so far after each step (the command writes it, so a run cut short keeps what it measured)."""
    started = time.perf_counter()
    chosen, left_out = plan(budget_s, steps)
    env = environment()
    checks: list[Check] = []
    timings: list[tuple[str, float]] = []
    for step in chosen:
        echo(f"gpu-check: {step.name} (planned {step.seconds:.0f} s)")
        step_started = time.perf_counter()
        try:
            results = step.run()
        except Exception as error:  # one broken step must not lose the others' results
            results = [failed(step.name, f"{type(error).__name__}: {error}"[:400])]
        timings.append((step.name, time.perf_counter() - step_started))
        for check in results:
            echo(
                f"  {check.verdict:4}  {check.name}: {check.cells()[1]} {check.unit} {check.detail}".rstrip()
            )
        checks += results
        if on_step is not None:
            on_step(GpuReport(env, checks, left_out, time.perf_counter() - started, timings))
    return GpuReport(env, checks, left_out, time.perf_counter() - started, timings)


def no_gpu_reason() -> str | None:
    """Why the check cannot run here (no CUDA GPU for torch, or numba stuck on its simulator), or None.
    (`workbench.bench.kernels` imports torch: imported when asked, not as the CLI builds its parser.)"""
    from workbench.bench.numba_gpu import no_gpu_reason as kernels_reason

    return kernels_reason()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET_S, help="seconds the plan may take")
    parser.add_argument("--out", default=str(REPO / "docs" / "gpu"), help="folder of the report")
    parser.add_argument("--plan", action="store_true", help="print the plan and exit")
    parser.add_argument("--steps", nargs="+", metavar="STEP", help="run only these steps (see --plan)")


def run(args: argparse.Namespace) -> int:
    check_int("budget", args.budget, minimum=1)
    try:
        steps = only(args.steps) if args.steps else None
    except ValueError as error:
        print(f"workbench gpu-check: error: {error}", file=sys.stderr)
        return 2
    chosen, left_out = plan(args.budget, steps)
    if args.plan:
        rows = [[step.name, f"{step.seconds:.0f} s", "runs"] for step in chosen]
        rows += [[name, "", f"left out: {why}"] for name, why in left_out]
        print(text_table(("step", "planned", "plan"), rows))
        print(f"{sum(step.seconds for step in chosen):.0f} s of the {args.budget} s budget")
        return 0
    reason = no_gpu_reason()
    if reason is not None:
        print(
            f"workbench gpu-check: error: no CUDA GPU here ({reason}); the check needs one NVIDIA GPU with "
            "its driver and a CUDA build of torch",
            file=sys.stderr,
        )
        return 2
    report = run_check(args.budget, steps, on_step=lambda so_far: so_far.write(args.out))
    markdown, data = report.write(args.out)
    print(
        f"{len(report.checks)} checks, {len(report.failures)} failed, {report.seconds:.0f} s: "
        f"{markdown}, {data}"
    )
    return 1 if report.failures else 0
