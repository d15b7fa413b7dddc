"""A fix for numba-cuda's CPU simulator: shared arrays that two threads of a block may allocate twice.

The simulator runs every CUDA thread of a block as a Python thread. ``cuda.shared.array`` looks the block's
array up by the calling line and creates it when missing, without a lock (numba-cuda 0.30): when the
interpreter switches threads between the look-up and the store, two threads of one block each get an array
of their own, the block's threads no longer share their tiles, and a kernel such as the tiled matmul returns
wrong numbers now and then (seen once in CI; made certain by slowing that step down, in
``tests/kernels/test_simulator.py``). :func:`guard_shared_arrays` replaces the method with one that looks up
and stores under a lock. It changes only the simulator's class, once per process, and is applied by
:func:`workbench.kernels._numba.load_cuda` when kernels run on the simulator.
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
        if alignment is not None or shape == 0:  # refused, or the one dynamic buffer: nothing to race on
            return unguarded(self, shape, dtype, alignment)
        caller = sys._getframe(1)  # the kernel's line identifies the array, as in numba's own method
        key = (caller.f_code.co_filename, caller.f_lineno)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    array.__doc__ = unguarded.__doc__
    array.__wrapped__ = unguarded  # numba's own method, for tests that show the race
    setattr(array, GUARD_MARK, True)
    shared.array = array
    return True
