"""Two additions to numba-cuda's CPU simulator: a fix for shared arrays that two threads of a block may
allocate twice, shared arrays with an alignment, and the warp shuffle it lacks.

The simulator runs every CUDA thread of a block as a Python thread. ``cuda.shared.array`` looks the block's
array up by the calling line and creates it when missing, without a lock (numba-cuda 0.30): when the
interpreter switches threads between the look-up and the store, two threads of one block each get an array
of their own, the block's threads no longer share their tiles, and a kernel such as the tiled matmul returns
wrong numbers now and then (seen once in CI; made certain by slowing that step down, in
``tests/kernels/test_simulator.py``). :func:`guard_shared_arrays` replaces the method with one that looks up
and stores under a lock. It changes only the simulator's class, once per process, and is applied by
:func:`workbench.kernels._numba.load_cuda` when kernels run on the simulator. numba-cuda's simulator refuses
``alignment=`` (which the vectorized matmul gives its slabs, `workbench.kernels.vector_tile`); the guard's
method honours it.

The simulator has no ``cuda.shfl_down_sync``, which the reductions use for their last five steps on a GPU.
:func:`emulate_warp_shuffles` adds it, so the simulator tests run the kernels' own code: each calling thread
posts its value and reads the value of the lane `delta` above it in its warp (its own when that lane is past
the warp or the block, as the hardware does). It exchanges through barriers, so every live thread of the
block must call it at the same point, as the reductions here do.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

GUARD_MARK = "_workbench_locked"


def guard_shared_arrays() -> bool:
    """Make the simulator's ``cuda.shared.array`` allocate each block's array once, under a lock.

    Returns True when this call installed the guard, False when it was there already. Imports the
    simulator's kernel API (harmless on a GPU, where numba.cuda imports it too, and never used there).
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, GUARD_MARK, False):
        return False
    unguarded = shared.array
    lock = threading.Lock()

    def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> np.ndarray:
        if shape == 0:  # the one dynamic buffer: nothing to race on
            return unguarded(self, shape, dtype)
        caller = sys._getframe(1)  # the kernel's line identifies the array, as in numba's own method
        key = (caller.f_code.co_filename, caller.f_lineno)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                found = self._allocations[key] = aligned_empty(shape, dtype, alignment)
        return found

    array.__doc__ = unguarded.__doc__
    array.__wrapped__ = unguarded  # numba's own method, for tests that show the race
    setattr(array, GUARD_MARK, True)
    shared.array = array
    return True


def aligned_empty(shape: Any, dtype: Any, alignment: int | None) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose first byte is a multiple of `alignment` (None: NumPy's own).

    Example:
        >>> aligned_empty((3, 5), np.float32, 64).ctypes.data % 64
        0
    """
    array = np.empty(shape, dtype)
    if not alignment or array.ctypes.data % alignment == 0:
        return array
    raw = np.empty(array.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)


SHUFFLE_MARK = "_workbench_shfl_down_sync"


def emulate_warp_shuffles() -> bool:
    """Give the simulator's ``cuda`` module ``shfl_down_sync`` (see the module docstring).

    Returns True when this call added it, False when it was there already.
    """
    from numba.cuda.simulator import kernelapi

    module = kernelapi.FakeCUDAModule
    if getattr(module, SHUFFLE_MARK, False):
        return False

    def shfl_down_sync(self: Any, mask: int, value: Any, delta: int) -> Any:
        thread = threading.current_thread()
        exchange = self.__dict__.setdefault("_workbench_shuffles", {})  # one block runs at a time
        exchange[thread.thread_id] = value
        thread.syncthreads()
        source = thread.thread_id + delta
        same_warp = source // 32 == thread.thread_id // 32 and source in exchange
        result = exchange[source] if same_warp else value
        thread.syncthreads()  # every lane has read before any posts its next value
        exchange.pop(thread.thread_id, None)
        return result

    module.shfl_down_sync = shfl_down_sync
    setattr(module, SHUFFLE_MARK, True)
    return True
