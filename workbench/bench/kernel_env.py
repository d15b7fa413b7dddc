"""Where to train on CPU: the `workbench` kernel's environment against plain python, in child processes.

    workbench bench kernel-env             # prints the table and the ratios
    workbench bench kernel-env --repeats 5

The kernelspec's ``env`` (``MALLOC_TOP_PAD_``) takes effect only when a process starts, so each variant
runs in a fresh child: one with the kernelspec's environment, one without it, alternating, `repeats` times.
Each child times, alternately, the hand-written loop of `workbench bench trainer` on its main thread and
the Trainer through `Dashboard.start` + `wait` (training on a second thread, as the Start button does).
Printed: the medians, each variant's ratio with its range over the repeats, and the two ratios the
kernel is set up for: background training / hand-written loop inside the kernel's environment (target
≤ 1.03), and the hand-written loop in the kernel's environment / in plain python (below 1: the kernel is
the faster place to train).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from workbench._validate import check_int
from workbench.kernelspec import read_kernelspec
from workbench.tables import text_table

_CHILD = "import json, sys; from workbench.bench.kernel_env import child_timings; print(json.dumps(child_timings(int(sys.argv[1]))))"  # noqa: E501


def kernel_environment() -> dict[str, str]:
    """The variables the `workbench` kernelspec sets (``workbench/resources/kernelspec/kernel.json``)."""
    return dict(read_kernelspec().get("env", {}))


@dataclass(frozen=True)
class KernelEnvBenchmark:
    """Seconds per child run: ``{"kernel"|"plain": {"hand"|"background": [per repeat]}}``."""

    environment: dict[str, str]
    runs: dict[str, dict[str, list[float]]]

    def median(self, env: str, loop: str) -> float:
        return statistics.median(self.runs[env][loop])

    def ratio(self, top: tuple[str, str], bottom: tuple[str, str]) -> tuple[float, float, float]:
        """Median ratio and its range over the repeats (each repeat's pair of runs divided)."""
        pairs = [
            a / b for a, b in zip(self.runs[top[0]][top[1]], self.runs[bottom[0]][bottom[1]], strict=True)
        ]
        return self.median(*top) / self.median(*bottom), min(pairs), max(pairs)

    def table(self) -> str:
        def shown(ratio: tuple[float, float, float]) -> str:
            return f"{ratio[0]:.3f} ({ratio[1]:.2f}–{ratio[2]:.2f})"

        rows = [
            [f"{loop} loop, {env}", f"{self.median(key, loop_key):.3f} s", "", ""]
            for key, env in (("plain", "plain python"), ("kernel", "workbench kernel env"))
            for loop_key, loop in (("hand", "hand-written"), ("background", "Dashboard.start"))
        ]
        rows.append(
            [
                "Dashboard.start / hand-written, kernel env",
                "",
                shown(self.ratio(("kernel", "background"), ("kernel", "hand"))),
                "≤ 1.03",
            ]
        )
        rows.append(
            [
                "Dashboard.start / hand-written, plain python",
                "",
                shown(self.ratio(("plain", "background"), ("plain", "hand"))),
                "",
            ]
        )
        rows.append(
            [
                "hand-written: kernel env / plain python",
                "",
                shown(self.ratio(("kernel", "hand"), ("plain", "hand"))),
                "< 1",
            ]
        )
        return text_table(["what", "median", "ratio (range over repeats)", "target"], rows)


def benchmark_kernel_environment(*, repeats: int = 3, epochs: int = 3) -> KernelEnvBenchmark:
    """Run the children (see the module docstring) and collect their timings."""
    check_int("repeats", repeats, minimum=1)
    check_int("epochs", epochs, minimum=1)
    environment = kernel_environment()
    plain = {k: v for k, v in os.environ.items() if k not in environment}
    runs: dict[str, dict[str, list[float]]] = {
        "plain": {"hand": [], "background": []},
        "kernel": {"hand": [], "background": []},
    }
    for _ in range(repeats):
        for name, env in (("plain", plain), ("kernel", {**plain, **environment})):
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, str(epochs)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"the {name} child failed:\n{done.stderr[-2000:]}")
            timings = json.loads(done.stdout.strip().splitlines()[-1])
            for loop, seconds in timings.items():
                runs[name][loop].append(seconds)
    return KernelEnvBenchmark(environment=environment, runs=runs)


def child_timings(epochs: int) -> dict[str, float]:
    """In a child: the hand-written loop and Dashboard.start + wait, twice each alternating; the medians."""
    from workbench.bench.trainer_variants import background_dashboard_seconds, hand_written_seconds

    hand_written_seconds(epochs)  # warm-up: thread pools, first-call costs
    hand, background = [], []
    for _ in range(2):
        hand.append(hand_written_seconds(epochs))
        background.append(background_dashboard_seconds(epochs))
    return {"hand": statistics.median(hand), "background": statistics.median(background)}
