"""The direct launch path (workbench.kernels.direct_launch) without a GPU: its packing against numba's own
argument packing, and `launch`'s routing (first call through numba, later calls direct) with a stand-in
dispatcher and a stand-in cuda.core launch. On a GPU, tests/gpu runs the real thing."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workbench.kernels import _numba, direct_launch
from workbench.kernels._numba import Buffer, launch
from workbench.kernels.direct_launch import LAUNCH_VARIABLE, KernelStream

# Runs where numba.cuda is the real target, not the simulator (no driver needed for this much): numba's
# `_Kernel._prepare_args` packs device memory (a strided view, as numba makes of a CUDA tensor) and scalars.
_AGAINST_NUMBA = r"""
import json
from types import SimpleNamespace

import numpy as np
import torch
from numba.cuda.cudadrv.devicearray import _StridedLayoutShim, _StridedMemoryViewShim
from numba.cuda.dispatcher import _Kernel
from numba.cuda.typing.typeof import Purpose, typeof

from workbench.kernels.direct_launch import operand_key, pack_tensor, scalar_packer


def numba_packs(numba_type, value):
    packed = []
    _Kernel._prepare_args(SimpleNamespace(extensions=[]), numba_type, value, 0, [], packed)
    return packed


def device_memory(array):
    layout = _StridedLayoutShim(
        strides_in_bytes=array.strides,
        is_contiguous_c=array.flags.c_contiguous,
        is_contiguous_f=array.flags.f_contiguous,
        is_contiguous_any=True,
    )
    view = _StridedMemoryViewShim(
        ptr=array.ctypes.data, shape=array.shape, dtype=array.dtype, size=array.size, _layout=layout
    )
    return SimpleNamespace(__cuda_memory__=True, _strided_memory_view_shim=view)


results = []
tensors = [torch.arange(7.0), torch.zeros(3, 4), torch.zeros(2, 3, 5), torch.arange(10.0)[3:],
           torch.zeros(4, 6)[1:3], torch.arange(5), torch.zeros(1, 9), torch.zeros(6, 1)]
for tensor in tensors:
    numba_type = typeof(tensor.numpy(), Purpose.argument)
    ours = []
    pack_tensor(tensor, ours)
    key = operand_key(SimpleNamespace(host=tensor, kind="torch"))
    typed = numba_type.layout == "C" and numba_type.ndim == key[2] and str(numba_type.dtype) in str(key[1])
    same = ours == numba_packs(numba_type, device_memory(tensor.numpy()))
    results.append([str(numba_type), same, typed])
for value in [np.float32(0.25), 1.5, True, False, 7, np.int32(-3), np.int64(2**40)]:
    numba_type = typeof(value, Purpose.argument)
    theirs, ours = numba_packs(numba_type, value)[0], scalar_packer(numba_type)(value)
    same = type(ours) is type(theirs) and getattr(ours, "value", ours) == getattr(theirs, "value", theirs)
    results.append([str(numba_type), same, True])
print(json.dumps(results))
"""


def test_operands_are_packed_as_numba_packs_them():
    environment = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _AGAINST_NUMBA], capture_output=True, text=True, env=environment, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == 15
    assert [name for name, same, _ in results if not same] == []
    assert [name for name, _, typed in results if not typed] == []


@dataclass(frozen=True)
class _ArrayType:  # what the stand-in dispatcher types an array as
    ndim: int
    layout: str = "C"


class _Dispatcher:
    """numba's CUDA dispatcher, as much as `launch` and `direct_launch` use of it."""

    def __init__(self, debug: bool = False):
        self.targetoptions: dict = {}
        self.numba_calls: list[tuple] = []
        self.compiled = SimpleNamespace(
            debug=debug,
            cooperative=False,
            _codelibrary=SimpleNamespace(get_cufunc=lambda: SimpleNamespace(kernel="loaded function")),
        )
        self.overloads: dict = {}

    def typeof_pyval(self, value):
        return _ArrayType(value.ndim) if isinstance(value, np.ndarray) else type(value).__name__

    def __getitem__(self, configuration):
        def call(*operands):
            self.numba_calls.append((configuration, operands))
            types = tuple(self.typeof_pyval(operand) for operand in operands)
            self.overloads[types] = self.compiled  # compiled for this signature

        return call


@pytest.fixture
def on_a_gpu(monkeypatch):
    """`launch` as on a GPU (no simulator, device already current); cuda.core's launch recorded."""
    import cuda.core

    launched: list[tuple] = []
    monkeypatch.setattr(_numba, "on_simulator", lambda: False)
    monkeypatch.setattr(_numba, "follow_device", lambda cuda, index: None)
    monkeypatch.setattr(_numba, "load_cuda", lambda: None)
    monkeypatch.setattr(cuda.core, "launch", lambda *arguments: launched.append(arguments))
    monkeypatch.delenv(LAUNCH_VARIABLE, raising=False)
    monkeypatch.setattr(direct_launch, "_KERNELS", {})
    return launched


def _tensor(*shape):
    return Buffer(torch.arange(float(np.prod(shape))).reshape(shape), None, "torch")


_STREAM = KernelStream(0, "numba's stream", "cuda.core's stream")


def test_a_kernel_launches_through_numba_once_per_signature_then_directly(on_a_gpu):
    kernel = _Dispatcher()
    x, out = _tensor(3, 4), _tensor(1)
    launch(kernel, 2, 8, _STREAM, x, out, np.float32(0.5), True)
    assert len(kernel.numba_calls) == 1 and on_a_gpu == []
    configuration, operands = kernel.numba_calls[0]
    assert configuration == (2, 8, "numba's stream") and isinstance(operands[0], np.ndarray)

    y = _tensor(3, 4)  # new tensors, same signature: no numba
    launch(kernel, 2, 8, _STREAM, y, out, np.float32(0.25), False)
    assert len(kernel.numba_calls) == 1
    ((stream, config, function, *parameters),) = on_a_gpu
    assert (stream, function) == ("cuda.core's stream", "loaded function")
    assert (config.grid, config.block) == ((2, 1, 1), (8, 1, 1))
    y_address, out_address = y.host.data_ptr(), out.host.data_ptr()
    assert parameters[:-2] == [0, 0, 12, 4, y_address, 3, 4, 16, 4, 0, 0, 1, 4, out_address, 1, 4]
    assert isinstance(parameters[-2], ctypes.c_float) and parameters[-2].value == 0.25
    assert parameters[-1] is False
    (direct,) = [d for (dispatcher, _), d in direct_launch.direct_kernels().items() if dispatcher is kernel]
    assert direct.launches == 1

    launch(kernel, 2, 8, _STREAM, _tensor(12), out, np.float32(0.5), True)  # a 1-D x: another signature
    assert len(kernel.numba_calls) == 2 and len(on_a_gpu) == 1


def test_numba_keeps_the_launches_this_path_cannot_take(on_a_gpu, monkeypatch):
    kernel = _Dispatcher()
    numpy_operand = Buffer(np.zeros(3, np.float32), np.zeros(3, np.float32), "numpy")
    for _ in range(2):
        launch(kernel, 1, 8, _STREAM, numpy_operand, np.float32(1))  # a NumPy operand
        launch(kernel, 1, 8, 0, _tensor(3), np.float32(1))  # numba's default stream: no torch stream
    debug = _Dispatcher(debug=True)
    for _ in range(2):
        launch(debug, 1, 8, _STREAM, _tensor(3), np.float32(1))  # a debug build
    monkeypatch.setenv(LAUNCH_VARIABLE, "numba")
    switched_off = _Dispatcher()
    for _ in range(2):
        launch(switched_off, 1, 8, _STREAM, _tensor(3), np.float32(1))
    assert on_a_gpu == []
    assert (len(kernel.numba_calls), len(debug.numba_calls), len(switched_off.numba_calls)) == (4, 2, 2)


def test_a_bad_launch_choice_is_named_with_the_choices(on_a_gpu, monkeypatch):
    monkeypatch.setenv(LAUNCH_VARIABLE, "fast")
    with pytest.raises(ValueError, match=r"WORKBENCH_KERNEL_LAUNCH='fast'; allowed: direct, numba"):
        launch(_Dispatcher(), 1, 8, _STREAM, _tensor(3))


def test_a_first_direct_launch_that_fails_hands_the_kernel_back_to_numba_with_a_warning(
    on_a_gpu, monkeypatch
):
    import cuda.core

    def refuse(*arguments):
        raise TypeError("an argument cuda.core cannot take")

    monkeypatch.setattr(cuda.core, "launch", refuse)
    kernel = _Dispatcher()
    launch(kernel, 1, 8, _STREAM, _tensor(3), np.float32(1))
    with pytest.warns(
        RuntimeWarning, match="an argument cuda.core cannot take.*numba's dispatcher launches it"
    ):
        launch(kernel, 1, 8, _STREAM, _tensor(3), np.float32(1))
    launch(kernel, 1, 8, _STREAM, _tensor(3), np.float32(1))
    assert len(kernel.numba_calls) == 3
    assert list(direct_launch.direct_kernels().values()) == [None]
