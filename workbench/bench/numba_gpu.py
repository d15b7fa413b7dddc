"""Whether numba's kernels can be benchmarked on a GPU here (for the kernels and launch-cost benchmarks)."""

from __future__ import annotations

import sys

import torch


def no_gpu_reason() -> str | None:
    """Why the kernels cannot be benchmarked on a GPU here, or None when they can (imports no numba)."""
    if not torch.cuda.is_available():
        build = f" (CPU-only torch build {torch.__version__})" if torch.version.cuda is None else ""
        return f"torch.cuda.is_available() is False{build}"
    from workbench.devices import choose_numba_backend

    if "numba.cuda" in sys.modules:
        from workbench.kernels._numba import on_simulator

        if on_simulator():
            return "numba.cuda was imported on its CPU simulator; restart without NUMBA_ENABLE_CUDASIM=1"
        return None
    backend = choose_numba_backend()
    if backend.simulator:
        return f"numba would run on its CPU simulator ({backend.reason})"
    return None
