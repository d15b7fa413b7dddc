"""Writes docs/gpu/nvidia-h200.{md,json} from run 3 of 2026-11-27 (2026-11-27-3-*), with what led to it.

python docs/gpu/raw/h200.py
"""

import dataclasses
import json
from pathlib import Path

from workbench.bench.gpu_report import GpuReport

HERE = Path(__file__).resolve().parent
NOTES = [
    "One run of `workbench gpu-check` (docs/gpu/raw/device_call.sh) on an nvidia-h200 machine of this "
    "workplace on 2026-11-27 (the session asked for an H100; the device tool started an H200 when none "
    "opened), raw report, log and evidence in docs/gpu/raw/2026-11-27-3-*. It ran the steps gpu tests, "
    "kernels, trainer, peers, dashboard and input paths (239 s). Not run here: doctor, fsdp on this torch, "
    "hardware, precision and compile, notebooks; their latest measurements are the H100 report's "
    "(2026-11-26). Compare ratios, not times, with the H100's: the H200's host ran the same Python ~1.5× "
    "faster (a numba view of a tensor: 12.5 µs here, 19.7 µs on the H100).",
    "Before it, on an H100 the same day at commit c32b61c (2026-11-27-1-*: kernels, trainer, dashboard, "
    "input paths and the new peers step; 2026-11-27-2-*: host profiles), torch.profiler timed each "
    "benchmarked call (2026-11-27-1-profile.json): our kernels were level with torch's or faster on the "
    "device (sum of 100M floats 130.5 vs 138.4 µs, Adam on 100M parameters 1,037.6 vs 1,052.1 µs, SGD "
    "731.7 vs 730.0 µs, cross-entropy 8192×50000 forward and backward 2.66 vs 4.88 ms); what lost was the "
    "host's time per call: 600–650 µs for a sum (torch 180) and 590 µs for `FusedAdam.step` on 1M "
    "parameters (torch 64), where every operand was viewed for numba twice (`as_buffer(x).flat()`: 74 µs) "
    "and numba's wrapper of torch's stream made anew (17.9 µs). Since: an operand's numba view is made "
    "when a kernel first needs it (a 1-D operand's flat view is itself), the stream wrapper once per "
    "stream, and FusedAdam/FusedSGD keep their groups' operands. Here: `FusedAdam.step` on 1M parameters "
    "129 µs of host time (torch 47), a 1M `sum` 175 µs (torch 28; 2026-11-27-3-launch.txt), so Adam "
    "and SGD reach 1.00× and 0.96× and the reductions 0.48× (were 0.86×, 0.85× and 0.26× on the H100). "
    "The host cost over a bare numba launch is still well above the issue's 15 µs.",
    "The Trainer: a profile of `Trainer.fit` on the H100 (2026-11-27-2-trainer.txt) found the memory probe "
    "of each fit's first step reading every parameter's storage again for each tensor autograd saved "
    "(37,442 reads in two fits of the GPT); it reads them once per probed step now (per saved tensor only "
    "under FSDP, which registers gathered parameters while a layer runs): 1.16× the hand loop on the H100 "
    "before, 1.03× here. The peers' MLP on the H100: the Trainer 2.25× the hand loop, because a "
    "TensorDataset got 4 DataLoader workers per loader (each batch pickled through shared memory); a "
    "TensorDataset now loads in the training process: 1.20× the hand loop, ahead of Lightning, behind "
    "Fabric and Accelerate. The Dashboard: the H100 run timed 16-step fits whole (1.13×); the cost sits "
    "at each fit's end, where every plot draws its final state, so the row now parts per step (1.00×) and "
    "once per fit (60 ms).",
    "Still failing, with evidence: the memory estimate (2026-11-27-1-memory.json, the allocator's blocks "
    "alive at each case's peak): the GRU's peak holds a 32.5 MiB block allocated inside cuDNN's RNN (no "
    "Python frame) beside its 10.2 MiB output with the reserve space, and small_cnn a 2.1 MiB block "
    "without a Python frame (a cuDNN convolution workspace): workspaces the estimate leaves out. The "
    "digits epoch (1.14×): the MLP's step is host-bound (1.2–1.4 ms), so copying a 16 KB batch is not "
    "what limits it; 3× would need the step's host work gone (CUDA graphs). The data wait (48%): the "
    "loader alone takes 11.2 ms a batch with 4 workers, so it does not keep up with the step, which is "
    "the target's condition.",
    "Notebooks on the H200 (run 4, 2026-11-27-4-notebooks-log.txt: nbval of 01, 03, 05, 06 and 09 at "
    "their GPU sizes, WORKBENCH_QUICK=0, 5 workers, 76 s; not through gpu-check, whose step was not run):"
    " 86 cells passed, 20 failed. 09 passed whole. 01 (cells 1, 3, 14, 17, 26) and 06 (cell 6): output on"
    " stderr where none is stored (nbval did not keep the text; gpu-check's notebooks step now adds it to"
    " the failure). 01: likely numba's low-occupancy warning at the tutorials' small launches; "
    "`configure_numba` now turns it off unless NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS is set. 06 cell 6, "
    "likely: it runs `measure_peak` on the CPU, a torch.profiler profile: torch 2.10 and 2.11 warn "
    "'Profiler clears events at the end of each cycle' on every profile started without acc_events=True "
    "(pytorch#180348), which ours now pass (not re-run on a GPU). 03 (12 cells): one GPU gave one rank "
    "(NPROCS = the GPU count), so the stored 2-rank outputs differ, `bench ddp` refuses nprocs=1 and "
    "ranks on nccl met CPU tensors ('No backend type associated with device type cpu'); it now keeps the "
    "CPU path below two GPUs (not re-run on a GPU). 05 cell 13: fp16 was within 10% of fp32's test loss, "
    "but the GPU's third run printed a line ('fp16: ... True') that the output stored from the CPU (fp32 "
    "and bf16) lacks; the cell now prints one line whichever precisions ran. 06 cell 13: "
    "`estimate_memory` of the trained model (on the GPU) with a CPU sample failed inside torch; the "
    "sample now goes to the model's device.",
    "The project ran from the checkout (PYTHONPATH) on the machine's torch 2.11 and packages plus the "
    "carried wheels. Ratios are ours over the baseline's rate (time: the baseline's time over ours), so "
    "above 1 is faster, except the `× hand loop`, `× Trainer` and `× <peer>` rows (time over time: below 1 "
    "is faster); each from alternating repeats in one process.",
]


def main() -> None:
    run = GpuReport.from_json(json.loads((HERE / "2026-11-27-3-nvidia-h200.json").read_text()))
    dataclasses.replace(run, notes=NOTES).write(HERE.parent)


if __name__ == "__main__":
    main()
