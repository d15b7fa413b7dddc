"""What the kernels take (torch tensors, NumPy arrays, device arrays), what they give back, and errors."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from workbench.kernels import as_device_array, clip_grad_value, matmul
from workbench.kernels._numba import load_cuda


def test_outputs_follow_the_kind_of_the_input(device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = matmul(a, a, transpose_b=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 2)
    tensor = torch.from_numpy(a).to(device)
    out = matmul(tensor, tensor, transpose_b=True)
    assert isinstance(out, torch.Tensor) and out.device == tensor.device and out.shape == (2, 2)
    cuda = load_cuda()
    out = matmul(cuda.to_device(a), cuda.to_device(a), transpose_b=True)
    assert not isinstance(out, np.ndarray | torch.Tensor)
    np.testing.assert_array_equal(out.copy_to_host(), a @ a.T)


def test_in_place_kernels_write_into_the_callers_memory(device):
    tensor = torch.tensor([-2.0, 0.5, 3.0], device=device)
    parameter = torch.nn.Parameter(torch.tensor([4.0, -4.0], device=device))  # requires grad: used detached
    array = np.array([-2.0, 0.5, 3.0], np.float32)
    clip_grad_value([tensor, parameter, array], 1.0)
    assert tensor.tolist() == [-1.0, 0.5, 1.0] and parameter.tolist() == [1.0, -1.0]
    assert array.tolist() == [-1.0, 0.5, 1.0]


def test_autograd_sees_in_place_kernel_writes(device):
    from workbench.kernels import sgd_step

    p = torch.nn.Parameter(torch.ones(3, device=device))
    loss = (p * p).sum()  # saves p for backward
    sgd_step(p, torch.ones(3, device=device), lr=0.1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_as_device_array_keeps_the_shape_without_copying_on_the_simulator(on_gpu):
    array = np.ones((2, 3), np.float32)
    view = as_device_array(array)
    assert tuple(view.shape) == (2, 3)
    if not on_gpu:
        assert view is array
        tensor = torch.zeros(3)
        as_device_array(tensor)[1] = 7.0  # a view: the write lands in the tensor
        assert tensor.tolist() == [0.0, 7.0, 0.0]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ([1.0, 2.0], TypeError, "x must be a torch tensor, a NumPy array or a numba device array, got list"),
        (np.ones(3), TypeError, "x has dtype float64; allowed dtypes: float32"),
        (torch.ones(3, dtype=torch.float16), TypeError, "x has dtype float16; allowed dtypes: float32"),
        (np.ones((3, 4), np.float32).T, ValueError, r"x is not contiguous .* pass np.ascontiguousarray\(x\)"),
        (
            torch.ones(3, 4).T,
            ValueError,
            r"x is not contiguous \(shape \(4, 3\), strides \(1, 4\)\); pass x.contiguous",
        ),
        (np.ones((2, 0), np.float32), ValueError, r"x is empty \(shape \(2, 0\)\)"),
        (torch.ones(3, device="meta"), ValueError, "x is on meta; allowed devices: cuda .* or cpu"),
    ],
)
def test_bad_arrays_are_named(value, error, message):
    with pytest.raises(error, match=message):
        as_device_array(value, "x")


def test_a_cpu_tensor_is_refused_when_numba_runs_on_the_gpu(on_gpu):
    if not on_gpu:
        pytest.skip("needs numba on a CUDA GPU; here it runs on the CPU simulator")
    with pytest.raises(
        ValueError, match=r"a is a CPU tensor, but numba runs on the GPU; move it with a.cuda\(\)"
    ):
        matmul(torch.ones(2, 2), torch.ones(2, 2))


def test_a_cuda_tensor_is_refused_on_the_simulator(on_gpu):
    if on_gpu or not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA while numba runs on its simulator (NUMBA_ENABLE_CUDASIM=1)")
    with pytest.raises(ValueError, match="a is on cuda:0, but numba runs on its CPU simulator"):
        matmul(torch.ones(2, 2, device="cuda"), torch.ones(2, 2, device="cuda"))


LAZY = """
import sys
import workbench.kernels, workbench.kernels.gemm, workbench.kernels.autograd, workbench.kernels.optimizers
import workbench.kernels.clip, workbench.kernels.reduce, workbench.kernels.softmax_xent
import workbench.bench.kernels
from workbench.kernels import NumbaLinear, FusedAdam
NumbaLinear(2, 2)
assert "numba" not in sys.modules, "importing the kernels imported numba"
import numpy as np
from workbench.kernels import sum
sum(np.ones(3, np.float32))
assert "numba.cuda" in sys.modules
print("lazy")
"""


def test_numba_is_imported_by_the_first_kernel_call_not_by_imports():
    done = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lazy"


def test_device_arrays_in_scalars_and_losses_out(assert_close, rng):
    from workbench.kernels import softmax_cross_entropy
    from workbench.kernels import sum as numba_sum

    cuda = load_cuda()
    x = rng.standard_normal(37).astype(np.float32)
    assert abs(numba_sum(cuda.to_device(x)) - float(x.astype(np.float64).sum())) <= 1e-5 * np.abs(x).sum()
    logits, targets = np.zeros((2, 3), np.float32), np.array([0, 2])
    loss, lse = softmax_cross_entropy(cuda.to_device(logits), cuda.to_device(targets))
    assert_close(loss.copy_to_host(), [np.log(3)])
    assert_close(lse.copy_to_host(), [np.log(3)] * 2)
