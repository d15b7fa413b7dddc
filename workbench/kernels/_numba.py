"""The one door to numba.cuda: pick the backend, import it, and turn arrays into kernel operands.

:func:`load_cuda` applies :func:`workbench.devices.configure_numba` (GPU, or the CPU simulator when there is
no CUDA driver) before the first ``import numba.cuda``; nothing here runs at import.

A `Buffer` is one checked operand: ``device`` is what a kernel receives, ``host`` what the caller holds.

- torch CUDA tensors are used in place through ``__cuda_array_interface__`` (no copy), and kernels launch on
  torch's current stream, so they order with torch's own work there (work on other streams is yours to
  synchronise, as in torch);
- numba device arrays are used as they are;
- on the simulator, CPU torch tensors and NumPy arrays are used through NumPy views, so in-place updates land
  in the tensor;
- NumPy arrays on a real GPU are copied to the device and results copied back (handy, not fast);
- a CPU torch tensor with a real GPU is refused (move it with ``.cuda()``), as is a CUDA tensor on the
  simulator.
"""

from __future__ import annotations

import math
import sys
from functools import cache, lru_cache
from typing import Any

import numpy as np
import torch

from workbench._validate import check_int
from workbench.devices.cuda import SIMULATOR_VARIABLE, configure_numba, restore_numpy_row_stack
from workbench.kernels import direct_launch
from workbench.kernels._simulator import emulate_warp_shuffles, guard_shared_arrays
from workbench.kernels.direct_launch import KernelStream

FLOAT32 = ("float32",)
INDEX_DTYPES = ("int32", "int64")

# Default 1-D launches: a GPU wants thousands of threads; the simulator runs each thread as a Python
# thread, so it gets a few. Grid-stride loops make any launch cover any length.
GPU_THREADS, SIMULATOR_THREADS = 256, 8
GPU_BLOCKS_PER_SM, SIMULATOR_BLOCKS = 32, 2
SIMULATOR_SWITCH_INTERVAL = 1e-4  # seconds; see `launch`
WARP, ALL_LANES = 32, 0xFFFFFFFF  # threads per warp; the mask of a whole warp's lanes (warp shuffles)


def load_cuda() -> Any:
    """Configure numba's backend (if numba.cuda is not imported yet), import numba.cuda and return it.

    On the simulator this also applies :func:`~workbench.kernels._simulator.guard_shared_arrays` (a fix for
    shared arrays that numba's simulator can allocate twice in one block) and
    :func:`~workbench.kernels._simulator.emulate_warp_shuffles` (the warp shuffle it lacks).
    """
    if "numba.cuda" not in sys.modules:
        configure_numba()
    restore_numpy_row_stack()  # also when numba.cuda was imported before us (numpy 2.5, numba-cuda 0.30)
    from numba import cuda

    if cuda.config.ENABLE_CUDASIM:
        guard_shared_arrays()
        emulate_warp_shuffles()
    return cuda


def bind_cuda(namespace: dict[str, Any]) -> Any:
    """`load_cuda`, also bound as ``cuda`` in a kernel module's globals, where kernels (and the simulator,
    which swaps that global for its fake module during a launch) look it up."""
    cuda = load_cuda()
    namespace["cuda"] = cuda
    return cuda


def jit_kernel(*, launch_bounds: tuple[int, int] | None = None) -> Any:
    """``cuda.jit``, with ``launch_bounds=(threads per block, min resident blocks per SM)`` on a GPU target
    (ptxas then keeps registers low enough for that many blocks; the simulator has no launch bounds)."""
    cuda = load_cuda()
    if launch_bounds is None or cuda.config.ENABLE_CUDASIM:
        return cuda.jit
    return cuda.jit(launch_bounds=launch_bounds)


def on_simulator() -> bool:
    """True when numba.cuda runs kernels on its CPU simulator (imports numba.cuda)."""
    imported = sys.modules.get("numba.cuda")  # its backend is fixed once imported: read, not configured
    if imported is None:
        imported = load_cuda()
    return bool(imported.config.ENABLE_CUDASIM)


def torch_device() -> torch.device:
    """Where torch tensors must live for the kernels: ``cuda`` when numba runs on the GPU, ``cpu`` on its
    simulator (imports numba.cuda).

    Example:
        >>> torch_device().type in ("cuda", "cpu")
        True
    """
    return torch.device("cpu" if on_simulator() else "cuda")


@cache
def multiprocessors() -> int:
    """SMs of numba's current GPU (read once per process)."""
    return int(load_cuda().get_current_device().MULTIPROCESSOR_COUNT)


def launch_1d(n: int, threads: int | None = None, blocks: int | None = None) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over `n` elements.

    Defaults: 256 threads and up to 32 blocks per SM on a GPU; 8 threads and up to 2 blocks on the
    simulator. ``threads`` must be a power of two ≤ 1024 (the block reductions halve it).
    """
    simulator = on_simulator()
    if threads is None:
        threads = SIMULATOR_THREADS if simulator else GPU_THREADS
    check_power_of_two("threads", threads)
    most = SIMULATOR_BLOCKS if simulator else GPU_BLOCKS_PER_SM * multiprocessors()
    if blocks is None:
        blocks = max(1, min(math.ceil(n / threads), most))
    check_int("blocks", blocks, minimum=1)
    return blocks, threads


def launch(kernel: Any, grid: Any, block: Any, stream: Any, *operands: Any) -> None:
    """``kernel[grid, block, stream](*operands)``, a `Buffer` passed as its ``device``.

    On a GPU, a kernel's later calls on torch tensors with the signature of an earlier call skip numba's
    dispatcher (:mod:`workbench.kernels.direct_launch`: ~54 µs of host time per call on an H200 machine).

    On the simulator every CUDA thread is a Python thread and its block manager polls them at each
    ``syncthreads``; with Python's default 5 ms GIL switch interval that polling dominates, so the launch
    runs with a 0.1 ms interval (restored afterwards): shared-memory kernels run several times faster.
    """
    simulator = on_simulator()
    if isinstance(stream, KernelStream):  # the launch runs on the current context's GPU: the tensors'
        follow_device(load_cuda(), stream.device)
        if direct_launch.launch_directly(kernel, grid, block, stream, operands):
            return
    numba_operands = [operand.device if isinstance(operand, Buffer) else operand for operand in operands]
    configured = kernel[grid, block, stream.numba if isinstance(stream, KernelStream) else stream]
    if not simulator:
        configured(*numba_operands)
        direct_launch.remember(kernel, stream, numba_operands, operands)
        return
    saved = sys.getswitchinterval()
    sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL)
    try:
        configured(*numba_operands)
    finally:
        sys.setswitchinterval(saved)


def check_power_of_two(field: str, value: object, *, most: int = 1024) -> int:
    """Return `value` if it is a power of two in [1, most], else raise ValueError."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most
    if not ok or value & (value - 1):
        raise ValueError(f"{field} must be a power of two from 1 to {most}, got {value!r}")
    return value


def _kind(x: object) -> str | None:
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    if getattr(x, "__cuda_ndarray__", False) or hasattr(x, "__cuda_array_interface__"):
        return "numba"
    return None


def is_array(x: object) -> bool:
    """True for what `as_buffer` takes: a torch tensor, a NumPy array or a (numba) device array."""
    return _kind(x) is not None


def _dtype_name(x: Any, kind: str) -> str:
    if kind == "torch":
        return str(x.dtype).removeprefix("torch.")
    return np.dtype(x.dtype).name


def _is_contiguous(x: Any, kind: str) -> bool:
    if kind == "torch":
        return x.is_contiguous()
    if kind == "numpy":
        return x.flags.c_contiguous
    return x.is_c_contiguous()


def _strides(x: Any, kind: str) -> tuple[int, ...]:
    if kind == "torch":
        return tuple(x.stride())
    return tuple(s // np.dtype(x.dtype).itemsize for s in x.strides)


class Buffer:
    """One checked kernel operand: kernels get ``device``; the caller holds ``host``.

    A torch CUDA tensor's numba view is made when a kernel first needs it (`device`) and kept: making one
    costs ~25 µs of host time (measured on an H100 machine, 2026-11-27), so a buffer checked and then
    flattened makes one view, and an optimizer that keeps its buffers makes them once.
    """

    __slots__ = ("_device", "host", "kind")

    def __init__(self, host: Any, device: Any, kind: str) -> None:
        self.host = host
        self._device = device  # None: a torch tensor's view, made on first use
        self.kind = kind  # "torch", "numpy" or "numba"

    @property
    def device(self) -> Any:
        if self._device is None:
            self._device = _view_of_tensor(self.host.detach())
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host.shape if self.kind == "torch" else self.device.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def address(self) -> int:
        """Address of the first element: device memory on a GPU, host memory on the simulator."""
        if self.kind == "torch":
            return self.host.data_ptr()
        if on_simulator():
            return self.device.ctypes.data
        return self.device.__cuda_array_interface__["data"][0]

    def flat(self) -> Buffer:
        """The same memory as a 1-D buffer (views, no copies); itself when it is 1-D."""
        if len(self.shape) == 1:
            return self
        n = self.size
        if self.kind == "torch":
            return Buffer(self.host.detach().view(n), None, "torch")
        host = self.host.reshape(n)
        return Buffer(host, host if self.device is self.host else self.device.reshape(n), self.kind)

    def stream(self) -> KernelStream | int:
        """The stream to launch on: torch's current stream for a CUDA tensor, else numba's default (0)."""
        if self.kind == "torch" and self.host.device.type == "cuda":
            device = self.host.device
            return _kernel_stream(device.index or 0, torch.cuda.current_stream(device).cuda_stream)
        return 0

    def result(self) -> Any:
        """The caller's array after kernels wrote ``device`` (copied back for NumPy on a GPU).

        A torch tensor's version counter is bumped, as torch's in-place ops do, so autograd refuses a graph
        that saved the tensor before the kernel changed it.
        """
        if self.kind == "numpy" and self.device is not self.host:
            self.device.copy_to_host(self.host)
        if self.kind == "torch":
            torch.autograd.graph.increment_version(self.host)
        return self.host


@lru_cache(maxsize=64)
def _kernel_stream(device_index: int, handle: int) -> KernelStream:
    """numba's and cuda.core's wrappers of the CUDA stream `handle` on GPU `device_index` (a torch stream),
    made once per stream: numba's costs ~18 µs of host time (H100 machine, 2026-11-27)."""
    from cuda.core import Stream

    cuda = load_cuda()
    follow_device(cuda, device_index)
    return KernelStream(device_index, cuda.external_stream(handle), Stream.from_handle(handle))


def _view_of_tensor(t: torch.Tensor) -> Any:
    if t.device.type == "cuda":
        cuda = load_cuda()
        follow_device(cuda, t.device.index)
        # sync=False: no host wait on the tensor's stream; our kernels run on torch's current stream,
        # after the work torch queued there
        return cuda.as_cuda_array(t, sync=False)
    return t.numpy()


def follow_device(cuda: Any, index: int | None) -> None:
    """Make GPU `index` numba's current device in this thread when it is not, so that the kernels (and the
    stream they launch on) run on the device that holds their tensors: ``cuda:1`` from a thread whose
    numba device is 0 launches on GPU 1. One device's id read when it already is (the common case).

    Example (a stand-in for numba.cuda that records the switch):
        >>> from types import SimpleNamespace
        >>> chosen = []
        >>> device_0 = SimpleNamespace(id=0)
        >>> fake = SimpleNamespace(get_current_device=lambda: device_0, select_device=chosen.append)
        >>> follow_device(fake, 0), follow_device(fake, 1), chosen
        (None, None, [1])
    """
    index = 0 if index is None else index
    if cuda.get_current_device().id != index:
        cuda.select_device(index)


def as_buffer(x: Any, name: str, *, dtypes: tuple[str, ...] = FLOAT32, ndim: int | None = None) -> Buffer:
    """Check `x` (named `name` in errors) and wrap it for kernels.

    Raises:
        TypeError: `x` is not a torch tensor, NumPy array or device array, or its dtype is not in `dtypes`.
        ValueError: wrong number of dimensions, not contiguous, empty, or on a device numba cannot reach
            (a CPU tensor while numba runs on the GPU, a CUDA tensor while it runs on the simulator).
    """
    if isinstance(x, Buffer):  # checked already (an optimizer's kept buffers)
        return x
    kind = _kind(x)
    if kind is None:
        raise TypeError(
            f"{name} must be a torch tensor, a NumPy array or a numba device array, got {type(x).__name__}"
        )
    if kind == "numba" and not getattr(x, "__cuda_ndarray__", False):
        x = load_cuda().as_cuda_array(x)  # another library's device array (CuPy, JAX): a numba view
    dtype = _dtype_name(x, kind)
    if dtype not in dtypes:
        fix = _cast_fix(name, kind, dtypes[-1])
        raise TypeError(f"{name} has dtype {dtype}; allowed dtypes: {', '.join(dtypes)}; {fix}")
    shape = tuple(x.shape)
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {shape}")
    if not _is_contiguous(x, kind):
        fix = f"{name}.contiguous()" if kind == "torch" else f"np.ascontiguousarray({name})"
        raise ValueError(f"{name} is not contiguous (shape {shape}, strides {_strides(x, kind)}); pass {fix}")
    if math.prod(shape) == 0:
        raise ValueError(f"{name} is empty (shape {shape}); kernels need at least one element")
    return Buffer(x, _device_view(x, kind, name), kind)


def _cast_fix(name: str, kind: str, dtype: str) -> str:
    """How to give `name` as `dtype`, in the caller's library (a copy: kernels never cast)."""
    if kind == "torch":
        return f"pass {name}.to(torch.{dtype})"
    if kind == "numpy":
        return f"pass {name}.astype(np.{dtype})"
    return f"pass a {dtype} copy of {name}"


def _device_view(x: Any, kind: str, name: str) -> Any:
    simulator = on_simulator()
    if kind == "torch":
        t = x.detach()
        if t.device.type == "cuda" and simulator:
            raise ValueError(
                f"{name} is on {t.device}, but numba runs on its CPU simulator ({SIMULATOR_VARIABLE}=1); "
                f"pass {name}.cpu(), or start Python with {SIMULATOR_VARIABLE}=0 to use the GPU"
            )
        if t.device.type == "cpu" and not simulator:
            raise ValueError(f"{name} is a CPU tensor, but numba runs on the GPU; move it with {name}.cuda()")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} is on {t.device}; allowed devices: cuda (GPU) or cpu (simulator)")
        return None  # the view: made when a kernel first needs it (Buffer.device)
    if kind == "numpy":
        return x if simulator else load_cuda().to_device(x)
    return x


def empty(shape: tuple[int, ...], like: Buffer) -> Buffer:
    """A new float32 buffer of `shape`, of the same kind (and torch device) as `like`."""
    return _new(shape, like, zero=False)


def zeros(shape: tuple[int, ...], like: Buffer) -> Buffer:
    """`empty`, filled with zeros."""
    return _new(shape, like, zero=True)


def full(shape: tuple[int, ...], value: float, like: Buffer) -> Buffer:
    """`empty`, filled with `value`."""
    if like.kind == "torch":
        t = torch.full(shape, value, dtype=torch.float32, device=like.host.device)
        return Buffer(t, None, "torch")
    return _host_array(np.full(shape, value, np.float32), like.kind)


def _new(shape: tuple[int, ...], like: Buffer, *, zero: bool) -> Buffer:
    if like.kind == "torch":
        make = torch.zeros if zero else torch.empty
        t = make(shape, dtype=torch.float32, device=like.host.device)
        return Buffer(t, None, "torch")
    if like.kind == "numpy" or zero:
        return _host_array(np.zeros(shape, np.float32), like.kind)
    device = load_cuda().device_array(shape, np.float32)
    return Buffer(device, device, "numba")


def _host_array(array: np.ndarray, kind: str) -> Buffer:
    """A NumPy-made array as a buffer of `kind` ("numpy" or "numba")."""
    cuda = load_cuda()
    if kind == "numpy":
        return Buffer(array, array if on_simulator() else cuda.to_device(array), "numpy")
    device = cuda.to_device(array)
    return Buffer(device, device, "numba")


def read_scalar(buffer: Buffer) -> float:
    """Element 0 of `buffer` as a Python float (waits for the kernels that write it)."""
    if buffer.kind == "torch":
        host = buffer.host
        return host.item() if host.numel() == 1 else float(host.reshape(-1)[0])
    if buffer.kind == "numpy":
        return float(buffer.result().reshape(-1)[0])
    return float(buffer.device.copy_to_host().reshape(-1)[0])


def scalar_result(buffer: Buffer) -> Any:
    """A 1-element result as a 0-d torch tensor / NumPy array (a numba device array stays 1-element)."""
    host = buffer.result()
    if buffer.kind == "numba":
        return host
    return host.reshape(())


def as_device_array(x: Any, name: str = "x") -> Any:
    """`x` as kernels see it, after the checks of `as_buffer` (no copy where the memory is reachable).

    Args:
        x: a float32 torch tensor (CUDA on a GPU, CPU on the simulator), NumPy array or numba device array.
        name: how errors call `x`.

    Example:
        >>> import numpy as np
        >>> as_device_array(np.ones(3, np.float32)).shape
        (3,)
    """
    return as_buffer(x, name).device


def check_same_shape(name: str, buffer: Buffer, other_name: str, other: Buffer) -> None:
    """Raise ValueError naming both shapes unless the two buffers have the same shape."""
    if buffer.shape != other.shape:
        raise ValueError(
            f"{other_name} has shape {other.shape} but {name} has shape {buffer.shape}; they must match"
        )
