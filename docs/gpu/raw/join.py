"""Joins the two runs of 2026-11-26 into docs/gpu/nvidia-h100-80gb-hbm3.{md,json}.

    python docs/gpu/raw/join.py


Run 2 re-ran three steps after a fix; each step's rows come from the last run that ran it.
"""

import dataclasses
import json
from pathlib import Path

from workbench.bench.gpu_report import GpuReport

HERE = Path(__file__).resolve().parent
STEPS = (
    "doctor",
    "gpu tests",
    "fsdp on this torch",
    "hardware",
    "kernels",
    "trainer",
    "precision and compile",
)
CLIP_NOTE = (
    "; not a measurement: torch's clip_grad_norm_ was given the gradient tensors, not parameters, found no "
    ".grad and returned at once (the benchmark passes parameters since)"
)
NOTES = [
    "This report joins two runs of `workbench gpu-check` on nvidia-h100-x1 machines of this workplace on "
    "2026-11-26 (raw reports and logs in docs/gpu/raw/, joined by docs/gpu/raw/join.py). Run 1 ran every "
    "step (330 s) and found that no numba kernel compiled: numba-cuda 0.30.4 registers `np.row_stack`, which "
    "numpy 2.5 (the machine's 2.5.2) removed. With that fixed "
    "(workbench.devices.cuda.restore_numpy_row_stack), run 2 re-ran doctor, gpu tests and kernels "
    "(299 s); those rows are run 2's, the others run 1's. Device "
    "time allowed no third, full run: the FSDP rows predate the fix of their two failing tests (a CUDA "
    "reference compared with CPU ranks); the collectives themselves ran on torch 2.11.",
    "In both runs the project was not installed into the machine's Python (an editable install needs "
    "`editables`, which the bundle then lacked; it has it now): the check ran from the checkout on the "
    "machine's packages plus the bundle's. Ratios are ours over the baseline's rate (time: the baseline's "
    "time over ours), so above 1 is faster, except the `× hand loop` and `× off` rows (time over time: "
    "below 1 is faster); each from alternating repeats in one process.",
]


def step_of(name: str) -> str:
    prefixes = {
        "doctor": ("numba ",),
        "gpu tests": ("gpu tests",),
        "fsdp on this torch": ("fsdp on this torch",),
        "hardware": ("CPU ", "host", "device", "GPU matmul"),
        "kernels": ("matmul", "sum", "squared", "SGD", "Adam", "clip", "softmax", "kernels"),
        "trainer": ("Trainer step", "step-time"),
    }
    return next(
        (step for step, starts in prefixes.items() if name.startswith(starts)), "precision and compile"
    )


def main() -> None:
    names = (HERE / f"2026-11-26-{i}-nvidia-h100-80gb-hbm3.json" for i in (1, 2))
    runs = [GpuReport.from_json(json.loads(path.read_text())) for path in names]
    checks, steps = [], []
    for step in STEPS:
        run = next(run for run in reversed(runs) if step in dict(run.steps))
        for check in run.checks:
            if step_of(check.name) == step:
                if check.name.startswith("clip_grad_norm"):
                    check = dataclasses.replace(check, detail=check.detail + CLIP_NOTE)
                checks.append(check)
        steps.append((step, dict(run.steps)[step]))
    seconds = sum(run.seconds for run in runs)
    report = GpuReport(runs[-1].environment, checks, [], seconds, steps, NOTES)
    for path in report.write(HERE.parent):
        print(path)


if __name__ == "__main__":
    main()
