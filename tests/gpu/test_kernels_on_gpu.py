"""The numba kernels on the GPU as a torch user calls them: CUDA tensors in and out without copies, on
torch's current stream and on a side stream, fused optimizers against torch.optim, no host syncs."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from tests.gpu.helpers import relative_error
from workbench.kernels import FusedAdam, FusedSGD, as_device_array, matmul, numba_cross_entropy


def test_a_cuda_tensor_is_used_in_place(cuda):
    x = torch.randn(67, 45, device=cuda)
    view = as_device_array(x, "x")
    assert view.device_ctypes_pointer.value == x.data_ptr()
    assert view.shape == (67, 45)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("method", ["register", "vector", "tiled", "naive"])
def test_matmul_of_odd_shapes_matches_float64(cuda, method, transpose_a, transpose_b):
    m, k, n = 131, 77, 259
    a = torch.randn((k, m) if transpose_a else (m, k), device=cuda)
    b = torch.randn((n, k) if transpose_b else (k, n), device=cuda)
    c = matmul(a, b, method=method, transpose_a=transpose_a, transpose_b=transpose_b)
    want = (a.T if transpose_a else a).double() @ (b.T if transpose_b else b).double()
    assert c.device == cuda and c.dtype == torch.float32
    assert relative_error(c, want) < 1e-5


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_the_vector_matmul_runs_its_own_kernel_on_ragged_tiles(cuda, monkeypatch, transpose_a, transpose_b):
    """Sizes that are multiples of 4 but not of the 128×128 tile or the slab's depth of 8 (K % 8 == 4)."""
    from workbench.kernels import gemm

    monkeypatch.setattr(gemm, "register_kernel", lambda *args: pytest.fail(f"fell back: {args}"))
    m, k, n = 132, 76, 260
    a = torch.randn((k, m) if transpose_a else (m, k), device=cuda)
    b = torch.randn((n, k) if transpose_b else (k, n), device=cuda)
    c = matmul(a, b, method="vector", transpose_a=transpose_a, transpose_b=transpose_b)
    want = (a.T if transpose_a else a).double() @ (b.T if transpose_b else b).double()
    assert relative_error(c, want) < 1e-5


def test_kernels_order_with_torch_work_on_a_side_stream(cuda):
    side = torch.cuda.Stream(cuda)
    side.wait_stream(torch.cuda.current_stream(cuda))
    with torch.cuda.stream(side):
        a = torch.randn(1024, 1024, device=cuda)
        for _ in range(20):  # queued work on the side stream the kernel must wait for
            a = a * 1.0001
        c = matmul(a, a)
        done = c * 2
    torch.cuda.current_stream(cuda).wait_stream(side)
    assert relative_error(done, 2 * (a.double() @ a.double())) < 1e-5


def test_cross_entropy_matches_torch_and_never_waits_for_the_gpu(cuda):
    logits = torch.randn(513, 1003, device=cuda, requires_grad=True)
    target = torch.randint(0, 1003, (513,), device=cuda)
    reference = logits.detach().clone().requires_grad_(True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host sync in forward or backward raises
    try:
        loss = numba_cross_entropy(logits, target)
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = functional.cross_entropy(reference, target)
    want.backward()
    assert abs(loss.item() - want.item()) < 1e-5 * abs(want.item()) + 1e-6
    assert relative_error(logits.grad, reference.grad) < 1e-5


def _twin_models(cuda, seed=0):
    torch.manual_seed(seed)
    ours = torch.nn.Sequential(torch.nn.Linear(97, 301), torch.nn.GELU(), torch.nn.Linear(301, 13)).to(cuda)
    theirs = torch.nn.Sequential(torch.nn.Linear(97, 301), torch.nn.GELU(), torch.nn.Linear(301, 13)).to(cuda)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _train_both(ours, theirs, our_optimizer, their_optimizer, cuda, steps=10):
    torch.manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(64, 97, device=cuda), torch.randint(0, 13, (64,), device=cuda)
        for model, optimizer in ((ours, our_optimizer), (theirs, their_optimizer)):
            optimizer.zero_grad()
            functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    for mine, reference in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert relative_error(mine, reference) < 1e-5


@pytest.mark.parametrize("decoupled", [False, True], ids=["adam", "adamw"])
def test_fused_adam_follows_torch_fused_adam(cuda, decoupled):
    ours, theirs = _twin_models(cuda)
    options = {"lr": 1e-3, "weight_decay": 0.01}
    torch_class = torch.optim.AdamW if decoupled else torch.optim.Adam
    _train_both(
        ours,
        theirs,
        FusedAdam(ours.parameters(), decoupled=decoupled, **options),
        torch_class(theirs.parameters(), fused=True, **options),
        cuda,
    )


def test_fused_sgd_follows_torch_fused_sgd(cuda):
    ours, theirs = _twin_models(cuda)
    options = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}
    _train_both(
        ours,
        theirs,
        FusedSGD(ours.parameters(), **options),
        torch.optim.SGD(theirs.parameters(), fused=True, **options),
        cuda,
    )


def test_clipping_that_is_not_asked_for_the_norm_never_waits_for_the_gpu(cuda):
    from workbench.kernels import clip_grad_norm

    grads = [torch.randn(1000, device=cuda), torch.randn(37, device=cuda)]
    want = torch.cat(grads).double().norm()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        clip_grad_norm(grads, 1.0, return_norm=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert abs(float(torch.cat(grads).double().norm()) - min(1.0, float(want))) < 1e-4


def test_a_kernel_runs_on_the_gpu_of_its_tensor_from_a_fresh_thread():
    """A thread that never touched numba launches on the device of its tensor (the last GPU: on a machine
    with several, not numba's default 0)."""
    import threading

    from workbench.kernels import sum as numba_sum

    x = torch.randn(100_003, device=f"cuda:{torch.cuda.device_count() - 1}")
    found = {}
    thread = threading.Thread(target=lambda: found.update(total=numba_sum(x)))
    thread.start()
    thread.join()
    assert abs(found["total"] - float(x.double().sum())) < 1e-3 * float(x.double().abs().sum()) ** 0.5
