"""128-bit loads and stores of four consecutive float32 for numba kernels: ``ld.v4.f32`` / ``st.v4.f32``.

numba indexes an array one element at a time, and NVVM merges neighbouring scalar accesses into one vector
access only where it can prove 16-byte alignment, which it cannot for a kernel argument. These two
intrinsics say it outright: a load or store of ``<4 x float>`` with ``align 16`` at element `index` of the
array's flat data, with no bounds check and no negative-index wrap-around (the caller guarantees both:
`index` is a multiple of 4 of a 16-byte aligned, C-contiguous array, and index + 3 is inside it).

    a0, a1, a2, a3 = load4(a, index)        # one 128-bit load
    store4(c, index, c0, c1, c2, c3)        # one 128-bit store

On numba's CPU simulator the kernels run as Python: `simulated_load4` and `simulated_store4` do the same
on the array's elements, with NumPy's bounds checks, and also check the alignment rule, so a kernel that
breaks it fails in the simulator tests instead of faulting on a GPU.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

WIDTH = 4  # floats per access: 16 bytes


def simulated_load4(array: Any, index: int) -> tuple[float, float, float, float]:
    """`load4` on the simulator: elements index..index+3 of `array`'s flat data (index a multiple of 4).

    Example:
        >>> simulated_load4(np.arange(8, dtype=np.float32).reshape(2, 4), 4)
        (4.0, 5.0, 6.0, 7.0)
    """
    flat = _flat(array, index)
    return tuple(float(flat[index + i]) for i in range(WIDTH))  # type: ignore[return-value]


def simulated_store4(array: Any, index: int, v0: float, v1: float, v2: float, v3: float) -> None:
    """`store4` on the simulator.

    Example:
        >>> out = np.zeros((2, 4), np.float32)
        >>> simulated_store4(out, 4, 1, 2, 3, 4)
        >>> out[1].tolist()
        [1.0, 2.0, 3.0, 4.0]
    """
    flat = _flat(array, index)
    flat[index : index + WIDTH] = (v0, v1, v2, v3)


def _flat(array: Any, index: int) -> np.ndarray:
    data = np.asarray(getattr(array, "_item", getattr(array, "_ary", array)))
    if not data.flags.c_contiguous:
        raise ValueError("load4/store4 need a C-contiguous array")
    if data.ctypes.data % (4 * WIDTH):
        raise ValueError(f"load4/store4 need an array aligned to 16 bytes, got address {data.ctypes.data:#x}")
    if index % WIDTH or index < 0 or index + WIDTH > data.size:
        raise IndexError(f"load4/store4 at {index}: needs a multiple of {WIDTH} in 0..{data.size - WIDTH}")
    return data.reshape(-1)


@cache
def gpu_intrinsics() -> tuple[Any, Any]:
    """(load4, store4) as numba intrinsics for the GPU target (imports numba; built once per process)."""
    from llvmlite import ir
    from numba.core import types
    from numba.cuda.extending import intrinsic

    f32 = types.float32
    vector = ir.VectorType(ir.FloatType(), WIDTH)

    def vector_pointer(context: Any, builder: Any, array_type: Any, array: Any, index_type: Any, index: Any):
        data = context.make_array(array_type)(context, builder, array).data
        offset = context.cast(builder, index, index_type, types.intp)
        element = builder.gep(data, [offset], inbounds=True)
        return builder.bitcast(element, vector.as_pointer(element.type.addrspace))

    def accepted(array: Any, index: Any) -> bool:
        return isinstance(array, types.Array) and array.dtype == f32 and isinstance(index, types.Integer)

    @intrinsic
    def load4(typingctx: Any, array: Any, index: Any) -> Any:
        if not accepted(array, index):
            return None
        signature = types.UniTuple(f32, WIDTH)(array, index)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            pointer = vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            loaded = builder.load(pointer, align=16)
            values = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), i)) for i in range(WIDTH)]
            return context.make_tuple(builder, sig.return_type, values)

        return signature, codegen

    @intrinsic
    def store4(typingctx: Any, array: Any, index: Any, v0: Any, v1: Any, v2: Any, v3: Any) -> Any:
        if not accepted(array, index):
            return None
        signature = types.none(array, index, f32, f32, f32, f32)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            pointer = vector_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            packed = ir.Constant(vector, ir.Undefined)
            for i, value in enumerate(args[2:]):
                packed = builder.insert_element(packed, value, ir.Constant(ir.IntType(32), i))
            builder.store(packed, pointer, align=16)
            return context.get_dummy_value()

        return signature, codegen

    return load4, store4
