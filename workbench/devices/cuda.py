"""Is there CUDA, for torch and for numba, and does numba run on the GPU or on its CPU simulator?

numba reads ``NUMBA_ENABLE_CUDASIM`` once, when ``numba.cuda`` is first imported. workbench chooses it:

- you set ``NUMBA_ENABLE_CUDASIM`` (``0`` = GPU, ``1`` = simulator) before starting Python: that wins;
- otherwise, ``auto``: the simulator when no CUDA driver library can be loaded, the GPU when one can.

:func:`choose_numba_backend` only says what the choice is; :func:`configure_numba` applies it (sets the
variable) and is what code about to import ``numba.cuda`` calls. Importing this module changes nothing.

Asking torch or numba whether a GPU is usable initialises the CUDA driver, and a process whose driver is
initialised can no longer fork workers that use CUDA. So where a driver exists, :func:`cuda_status` asks
in a short-lived child process, leaving the caller (a notebook kernel, say) free to fork.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

SIMULATOR_VARIABLE = "NUMBA_ENABLE_CUDASIM"
# numba warns ("Grid size 7 will likely result in GPU under-utilization") at every launch of under 128
# blocks: the tutorials launch small grids on purpose, workbench's kernels size their own grids for the
# problem, and the warnings on stderr failed nbval on an H200 (2026-11-27). Off unless you set it.
OCCUPANCY_WARNINGS_VARIABLE = "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"


def _driver_library_names() -> tuple[str, ...]:
    if sys.platform == "win32":
        return ("nvcuda.dll",)
    if sys.platform == "darwin":
        return ()  # no CUDA on macOS
    return ("libcuda.so.1", "libcuda.so")


def cuda_driver_found() -> bool:
    """True when the CUDA driver library loads; loading it does not initialise CUDA (no ``cuInit``).

    Example (the notebooks' parameter cells size their runs by it):
        >>> ON_GPU = cuda_driver_found()
        >>> N_SAMPLES = 1_000_000 if ON_GPU else 20_000
    """
    for name in _driver_library_names():
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


@dataclass(frozen=True)
class NumbaBackend:
    """Where numba.cuda kernels run (``simulator`` True: on the CPU simulator) and why.

    Example:
        >>> print(NumbaBackend(True, "chosen by the caller"))
        CPU simulator (chosen by the caller)
    """

    simulator: bool
    reason: str

    def __str__(self) -> str:
        return f"{'CPU simulator' if self.simulator else 'GPU'} ({self.reason})"


def choose_numba_backend(
    environ: Mapping[str, str] | None = None, *, driver_found: bool | None = None
) -> NumbaBackend:
    """The backend numba.cuda will use: your ``NUMBA_ENABLE_CUDASIM`` if set, else auto from the driver.

    Example:
        >>> print(choose_numba_backend({}, driver_found=False))
        CPU simulator (auto: no CUDA driver found; NUMBA_ENABLE_CUDASIM=0 forces the GPU)
        >>> choose_numba_backend({"NUMBA_ENABLE_CUDASIM": "1"}, driver_found=True).simulator
        True

    Raises:
        ValueError: ``NUMBA_ENABLE_CUDASIM`` is set to something other than an integer.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(SIMULATOR_VARIABLE, "").strip()
    if value:
        try:
            simulator = int(value) != 0
        except ValueError:
            raise ValueError(
                f"{SIMULATOR_VARIABLE}={value!r} is not supported; allowed values: '0' (GPU), '1' (simulator)"
            ) from None
        return NumbaBackend(simulator, f"set by {SIMULATOR_VARIABLE}={value}")
    found = cuda_driver_found() if driver_found is None else driver_found
    if found:
        return NumbaBackend(False, f"auto: CUDA driver found; set {SIMULATOR_VARIABLE}=1 to simulate")
    return NumbaBackend(True, f"auto: no CUDA driver found; {SIMULATOR_VARIABLE}=0 forces the GPU")


def restore_numpy_row_stack() -> bool:
    """Give numpy 2.5+ back ``np.row_stack`` (an alias of ``np.vstack`` it removed); True if it was missing.

    numba-cuda 0.30 registers its CUDA implementation of ``np.row_stack`` when it first types a kernel and
    fails on numpy 2.5 ("module 'numpy' has no attribute 'row_stack'": every kernel, on every GPU). numba
    0.68 itself checks first; until numba-cuda does, the alias it expects is put back before it loads.

    Example:
        >>> import numpy as np
        >>> restore_numpy_row_stack() in (True, False) and np.row_stack is not None
        True
    """
    import numpy as np

    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack
    return True


def configure_numba(simulator: bool | None = None) -> NumbaBackend:
    """Apply the backend choice before ``numba.cuda`` is imported, and return it.

    Args:
        simulator: True/False to force the CPU simulator/the GPU; None for :func:`choose_numba_backend`.

    Raises:
        RuntimeError: ``numba.cuda`` was already imported with the other backend; it cannot be switched
            inside a running process (restart the kernel, then configure before importing numba.cuda).

    Example (the choice holds from numba.cuda's first import: the other one is refused, and says why):
        >>> backend = configure_numba()
        >>> from numba import cuda
        >>> try:
        ...     configure_numba(simulator=not backend.simulator)
        ... except RuntimeError as error:
        ...     print(str(error).split(" (")[0])
        numba.cuda was already imported on the ...; the ... was asked for
    """
    if simulator is None:
        backend = choose_numba_backend()
    else:
        backend = NumbaBackend(bool(simulator), "chosen by the caller")
    if "numba.cuda" in sys.modules:
        # numba.cuda read NUMBA_ENABLE_CUDASIM when it was imported; its config keeps that choice (the
        # numba.cuda.simulator module itself is imported on the GPU too, so its presence says nothing)
        in_effect = bool(sys.modules["numba.cuda"].config.ENABLE_CUDASIM)
        if in_effect != backend.simulator:
            have, want = ("simulator", "GPU") if in_effect else ("GPU", "simulator")
            raise RuntimeError(
                f"numba.cuda was already imported on the {have}; the {want} was asked for "
                f"({backend.reason}). numba cannot switch inside a running process: restart the kernel "
                f"and set {SIMULATOR_VARIABLE} (or call configure_numba) before anything imports numba.cuda."
            )
        return backend
    os.environ[SIMULATOR_VARIABLE] = "1" if backend.simulator else "0"
    os.environ.setdefault(OCCUPANCY_WARNINGS_VARIABLE, "0")
    restore_numpy_row_stack()
    return backend


@dataclass(frozen=True)
class CudaStatus:
    """CUDA as torch and numba see it. ``error`` says why the child-process probe failed, if it did.

    Example (no driver: no devices for torch, numba on its simulator; with one, the GPUs both see):
        >>> status = cuda_status()
        >>> status.driver_found or (status.torch_devices, status.numba_backend.simulator) == ((), True)
        True
    """

    driver_found: bool
    torch_version: str
    torch_cuda_build: str | None
    torch_devices: tuple[str, ...]
    numba_backend: NumbaBackend
    numba_devices: tuple[str, ...]
    error: str | None = None
    ptx_version: str | None = None  # the PTX ISA numba emits here (probed on a GPU only)
    kernel_error: str | None = None  # why a one-line numba kernel failed to compile or run, if it did

    @property
    def torch_available(self) -> bool:
        return bool(self.torch_devices)

    @property
    def numba_available(self) -> bool:
        return self.numba_backend.simulator or bool(self.numba_devices)


# Runs in a child process: initialising CUDA there keeps the parent fork-safe.
_PROBE = """
import json
import torch
torch_devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
numba_devices, numba_error = [], None
try:
    from workbench.devices.cuda import restore_numpy_row_stack
    restore_numpy_row_stack()
    from numba import cuda
    if cuda.is_available():
        names = [device.name for device in cuda.list_devices()]
        numba_devices = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    else:
        numba_error = str(cuda.cuda_error())
except Exception as error:  # reported, not raised: the probe must always answer
    numba_error = f"{type(error).__name__}: {error}"
ptx_version = kernel_error = None
if numba_devices:  # compile a one-line kernel (the PTX version numba's NVVM emits) and run it
    try:
        import re
        import numpy as np

        def probe(x):
            x[0] = 1.0

        ptx, _ = cuda.compile_ptx(probe, "void(float32[:])")
        found = re.search(r"^\\.version (\\d+\\.\\d+)", ptx, re.M)
        ptx_version = found.group(1) if found else None
        array = cuda.device_array(1, np.float32)
        cuda.jit(probe)[1, 1](array)
        cuda.synchronize()
    except Exception as error:
        kernel_error = f"{type(error).__name__}: {error}"[:400]
print(json.dumps({"torch": torch_devices, "numba": numba_devices, "numba_error": numba_error,
                  "ptx_version": ptx_version, "kernel_error": kernel_error}))
"""


def cuda_status(*, timeout: float = 120.0) -> CudaStatus:
    """CUDA for torch and numba, without initialising CUDA in this process.

    Without a CUDA driver the answer is immediate (nothing to ask). With one, torch and numba are asked
    in a child process that gets the same ``NUMBA_ENABLE_CUDASIM`` choice.

    Example:
        >>> status = cuda_status()
        >>> status.torch_available == bool(status.torch_devices), status.torch_version.split("+")[0] > "2"
        (True, True)
    """
    import torch  # importing torch does not initialise CUDA

    try:
        backend, problem = choose_numba_backend(), None
    except ValueError as error:  # reported, not raised: this is what the doctor is for
        backend = NumbaBackend(False, f"numba ignores the invalid {SIMULATOR_VARIABLE} and uses the GPU")
        problem = str(error)
    driver = cuda_driver_found()
    base = {
        "driver_found": driver,
        "torch_version": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "numba_backend": backend,
    }
    if not driver:
        return CudaStatus(torch_devices=(), numba_devices=(), error=problem, **base)
    probe = probe_cuda_in_child(simulator=backend.simulator, timeout=timeout)
    if "error" in probe:
        return CudaStatus(torch_devices=(), numba_devices=(), error=_joined(problem, probe["error"]), **base)
    numba_error = None if backend.simulator else probe.get("numba_error")
    return CudaStatus(
        torch_devices=tuple(probe["torch"]),
        numba_devices=() if backend.simulator else tuple(probe["numba"]),  # not the simulator's fakes
        error=_joined(problem, f"numba: {numba_error}" if numba_error else None),
        ptx_version=probe.get("ptx_version"),
        kernel_error=probe.get("kernel_error"),
        **base,
    )


def _joined(*problems: str | None) -> str | None:
    return "; ".join(p for p in problems if p) or None


def probe_cuda_in_child(*, simulator: bool, timeout: float = 120.0) -> dict:
    """Run the CUDA probe in a child Python; its JSON answer, or ``{"error": ...}``."""
    env = {**os.environ, SIMULATOR_VARIABLE: "1" if simulator else "0"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"CUDA probe did not answer within {timeout:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"CUDA probe failed (exit {done.returncode}): {last}"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": f"CUDA probe gave no answer: {done.stdout[-200:]!r}"}
