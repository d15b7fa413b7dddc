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
        c = matmul(a, a)  # numba's launch, or the direct one if an earlier test taught it this signature
        done, first = c * 2, a
        for _ in range(20):  # more queued work, then certainly the direct launch (this signature is known)
            a = a * 1.0001
        again = matmul(a, a) * 2
    torch.cuda.current_stream(cuda).wait_stream(side)
    assert relative_error(done, 2 * (first.double() @ first.double())) < 1e-5
    assert relative_error(again, 2 * (a.double() @ a.double())) < 1e-5


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


def _every_kernel(cuda) -> dict[str, torch.Tensor]:
    """Each kernel once on fresh, seeded inputs (same values at every call): what it returned or updated."""
    from workbench.kernels import (
        adam_step,
        clip_grad_value,
        sgd_step,
        softmax_cross_entropy,
        softmax_cross_entropy_backward,
        squared_norm,
    )
    from workbench.kernels import sum as numba_sum

    generator = torch.Generator(cuda).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=cuda, generator=generator)

    a, b, x, logits = randn(132, 76), randn(76, 260), randn(100_003), randn(67, 1003)
    targets = torch.randint(0, 1003, (67,), device=cuda, generator=generator)
    p, g, m, v, buf = randn(5000), randn(5000), randn(5000), randn(5000).abs(), randn(5000)
    clipped = randn(999)
    adam_step(p, g, m, v, step=3, lr=1e-2)
    q = randn(5000)
    sgd_step(q, g, buf, lr=0.1, momentum=0.9)
    clip_grad_value(clipped, 0.5)
    loss, lse = softmax_cross_entropy(logits, targets)
    return {
        "matmul register": matmul(a, b, method="register"),
        "matmul vector": matmul(a, b, method="vector"),
        "sum": torch.tensor(numba_sum(x)),
        "squared_norm": torch.tensor(squared_norm(x)),
        "adam param": p,
        "adam moments": torch.cat([m, v]),
        "sgd": torch.cat([q, buf]),
        "clip_grad_value": clipped,
        "cross-entropy": torch.cat([loss.reshape(1), lse]),
        "cross-entropy backward": softmax_cross_entropy_backward(logits, targets, lse),
    }


def test_each_kernel_launches_directly_after_its_first_call_with_numbas_results(cuda, monkeypatch):
    """The first call with a signature goes through numba's dispatcher, the next ones skip it
    (workbench.kernels.direct_launch); both give what numba's launch gives."""
    from workbench.kernels.direct_launch import LAUNCH_VARIABLE, direct_kernels

    monkeypatch.setenv(LAUNCH_VARIABLE, "numba")
    through_numba = _every_kernel(cuda)
    monkeypatch.setenv(LAUNCH_VARIABLE, "direct")
    first = _every_kernel(cuda)
    before = {key: d.launches for key, d in direct_kernels().items() if d is not None}
    direct = _every_kernel(cuda)
    torch.cuda.synchronize()
    after = {key: d.launches for key, d in direct_kernels().items() if d is not None}
    assert [key for key, d in direct_kernels().items() if d is None] == []  # every signature can go direct
    assert len(after) >= 9 and all(after[key] > before.get(key, 0) for key in after)
    for name, want in through_numba.items():
        assert relative_error(first[name], want) < 1e-6, name
        assert relative_error(direct[name], want) < 1e-6, name
