"""Launch a compiled kernel on torch CUDA tensors without numba's dispatcher.

numba's launch of a kernel on torch tensors costs ~54 µs of host time on an H200 machine (2026-11-27,
docs/gpu/raw/2026-11-27-3-launch.txt; 20 µs with numba arrays): the dispatcher types every argument
through a numba view of the tensor, converts the stream and packs the arguments, at every call. Here a
kernel's first call with a signature goes through numba (it compiles the kernel and types the
arguments); later calls with the same signature pack the operands as numba's ``_Kernel._prepare_args``
does (an array: meminfo 0, parent 0, element count, item size, data address, shape, strides in bytes)
and call cuda.core's ``launch`` on the compiled function, as numba's ``_Kernel.launch`` then does.

``WORKBENCH_KERNEL_LAUNCH=numba`` sends every launch through numba's dispatcher (to compare the two, or to
rule this path out); the default is ``direct``.

Only kernels whose operands are all torch tensors and scalars take this path; numba and NumPy arrays,
debug or cooperative kernels, kernels compiled per launch configuration and argument types other than
arrays, float32/float64, integers and booleans stay with numba.
"""

from __future__ import annotations

import ctypes
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

LAUNCH_VARIABLE = "WORKBENCH_KERNEL_LAUNCH"
LAUNCH_CHOICES = ("direct", "numba")

# A kernel's operands as a key: ("tensor", dtype, ndim) for a tensor, the type of a scalar; None: an
# operand this path does not pack (the call stays with numba).
OperandKey = tuple[Any, ...] | type


@dataclass(frozen=True)
class KernelStream:
    """The stream a kernel launches on, as numba and cuda.core each take it, made once per torch stream."""

    device: int  # the GPU's index
    numba: Any  # numba's external stream
    core: Any  # cuda.core's Stream


@dataclass
class DirectKernel:
    """A kernel compiled for one signature: how to pack its operands and where its function is loaded."""

    compiled: Any  # numba's compiled kernel for the signature (its ``_codelibrary`` holds the function)
    scalars: tuple[Callable[[Any], Any] | None, ...]  # per operand: its ctypes packer; None: a tensor
    functions: dict[int, Any] = field(default_factory=dict)  # GPU index → cuda.core Kernel
    launches: int = 0  # calls that took this path (tests and benchmarks read it)

    def launch(self, grid: Any, block: Any, stream: KernelStream, operands: Sequence[Any]) -> None:
        from cuda.core import launch

        parameters: list[Any] = []
        for pack, operand in zip(self.scalars, operands, strict=True):
            if pack is None:
                pack_tensor(operand.host, parameters)
            else:
                parameters.append(pack(operand))
        function = self.functions.get(stream.device)
        if function is None:  # loaded in the current context: the tensors' GPU's (`_numba.follow_device`)
            function = self.functions[stream.device] = self.compiled._codelibrary.get_cufunc().kernel
        launch(stream.core, launch_config(grid, block), function, *parameters)
        self.launches += 1


def direct_enabled() -> bool:
    """Whether launches may skip numba's dispatcher (`LAUNCH_VARIABLE`, read at every launch).

    Raises:
        ValueError: the variable holds something other than ``direct`` or ``numba``.
    """
    choice = os.environ.get(LAUNCH_VARIABLE, "direct")
    if choice not in LAUNCH_CHOICES:
        raise ValueError(f"{LAUNCH_VARIABLE}={choice!r}; allowed: {', '.join(LAUNCH_CHOICES)}")
    return choice == "direct"


def operand_key(operand: Any) -> OperandKey | None:
    """What decides a kernel's compiled signature for one operand: a torch tensor's dtype and dimensions
    (every buffer is contiguous, which numba types as layout C), a scalar's type; None for anything else.

    Example:
        >>> operand_key(3), operand_key("text")
        (<class 'int'>, None)
    """
    host = getattr(operand, "host", None)
    if isinstance(host, torch.Tensor) and getattr(operand, "kind", None) == "torch":
        return ("tensor", host.dtype, host.dim())
    if isinstance(operand, bool | int | float) or type(operand).__module__ == "numpy":
        return type(operand) if not hasattr(operand, "shape") or operand.shape == () else None
    return None


def signature_key(operands: Sequence[Any]) -> tuple[OperandKey, ...] | None:
    """Every operand's `operand_key`, or None when one of them has none."""
    keys = tuple(operand_key(operand) for operand in operands)
    return None if None in keys else keys


@lru_cache(maxsize=256)
def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Strides in bytes of a C-contiguous array of `shape`, as numba computes them for one without strides.

    Example:
        >>> c_strides((3, 4), 4)
        (16, 4)
    """
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def pack_tensor(tensor: torch.Tensor, parameters: list[Any]) -> None:
    """Append a contiguous tensor as numba's kernels take an array: meminfo 0, parent 0, element count, item
    size, data address, shape, strides in bytes.

    Example:
        >>> parameters = []
        >>> pack_tensor(torch.zeros(2, 3), parameters)
        >>> parameters[:4], parameters[5:]
        ([0, 0, 6, 4], [2, 3, 12, 4])
    """
    shape = tuple(tensor.shape)
    itemsize = tensor.element_size()
    parameters += (0, 0, math.prod(shape), itemsize, tensor.data_ptr(), *shape, *c_strides(shape, itemsize))


def scalar_packer(numba_type: Any) -> Callable[[Any], Any] | None:
    """How numba passes a scalar of `numba_type` to a kernel (a ctypes value; a bool as it is), or None
    for a type this path does not pack."""
    name = str(numba_type)
    if name == "float32":
        return ctypes.c_float
    if name == "float64":
        return ctypes.c_double
    if name == "bool":
        return bool
    if name.startswith(("int", "uint")) and hasattr(ctypes, f"c_{name}"):
        return getattr(ctypes, f"c_{name}")
    return None


@lru_cache(maxsize=1024)
def launch_config(grid: Any, block: Any) -> Any:
    """cuda.core's launch configuration for `grid` and `block` (ints or tuples), each as three extents as
    numba normalizes them (an int is (n, 1, 1)); no dynamic shared memory, not cooperative; made once per
    shape."""
    from cuda.core import LaunchConfig

    def three(extent: Any) -> tuple[int, ...]:
        extents = list(extent) if isinstance(extent, tuple | list) else [extent]
        return tuple(int(e) for e in extents + [1] * (3 - len(extents)))

    return LaunchConfig(grid=three(grid), block=three(block))


def compiled_for(kernel: Any, numba_operands: Sequence[Any], operands: Sequence[Any]) -> DirectKernel | None:
    """After numba launched `kernel` on `numba_operands` (which compiled it): its compiled signature as a
    `DirectKernel`, or None where numba must keep launching it (see the module's docstring)."""
    if kernel.targetoptions.get("extensions") or getattr(kernel, "_launch_config_sensitive", False):
        return None
    argument_types = tuple(kernel.typeof_pyval(value) for value in numba_operands)
    compiled = kernel.overloads.get(argument_types)
    if compiled is None or compiled.debug or compiled.cooperative:
        return None
    if getattr(compiled, "launch_config_sensitive", False):
        return None
    scalars = []
    for numba_type, operand in zip(argument_types, operands, strict=True):
        if isinstance(operand_key(operand), tuple):  # a tensor
            if getattr(numba_type, "layout", None) != "C":
                return None
            scalars.append(None)
            continue
        pack = scalar_packer(numba_type)
        if pack is None:
            return None
        scalars.append(pack)
    return DirectKernel(compiled, tuple(scalars))


# This process's kernels by (numba dispatcher, signature key): a DirectKernel, or None for a signature that
# stays with numba. Filled by `remember` after a kernel's first numba launch with that signature.
_KERNELS: dict[tuple[Any, tuple[OperandKey, ...]], DirectKernel | None] = {}


def launch_directly(kernel: Any, grid: Any, block: Any, stream: Any, operands: Sequence[Any]) -> bool:
    """Launch `kernel` on `operands` without numba's dispatcher when a first launch compiled it for their
    signature (`remember`) and the path is on; False when numba must launch it."""
    if not isinstance(stream, KernelStream) or not direct_enabled():
        return False
    key = signature_key(operands)
    direct = None if key is None else _KERNELS.get((kernel, key))
    if direct is None:
        return False
    try:
        direct.launch(grid, block, stream, operands)
    except Exception as error:  # the first direct launch of a signature: numba's takes over, said once
        if direct.launches:
            raise
        _KERNELS[kernel, key] = None
        name = getattr(getattr(kernel, "py_func", None), "__name__", repr(kernel))
        warnings.warn(
            f"kernel {name}: launching it without numba's dispatcher failed ({error!r}); numba's dispatcher "
            f"launches it from now on (set {LAUNCH_VARIABLE}=numba to skip this path)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def remember(kernel: Any, stream: Any, numba_operands: Sequence[Any], operands: Sequence[Any]) -> None:
    """After numba launched `kernel` (compiling it where needed): keep how to launch it directly next time."""
    if not isinstance(stream, KernelStream) or not direct_enabled():
        return
    key = signature_key(operands)
    if key is not None and (kernel, key) not in _KERNELS:
        _KERNELS[kernel, key] = compiled_for(kernel, numba_operands, operands)


def direct_kernels() -> dict[tuple[Any, tuple[OperandKey, ...]], DirectKernel | None]:
    """A copy of this process's direct kernels, by (numba dispatcher, signature key)."""
    return dict(_KERNELS)
