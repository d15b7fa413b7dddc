"""Softmax cross-entropy forward and backward against F.cross_entropy and the float64 specs."""

import numpy as np
import pytest
import torch
from torch.nn import functional

from workbench.kernels import (
    softmax_cross_entropy,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_backward_spec,
    softmax_cross_entropy_spec,
)


def _problem(device, rows, classes, target_dtype=torch.int64, scale=3.0):
    generator = torch.Generator().manual_seed(0)
    logits = (scale * torch.randn(rows, classes, generator=generator)).to(device)
    targets = torch.randint(0, classes, (rows,), generator=generator).to(device, target_dtype)
    return logits, targets


@pytest.mark.parametrize(("rows", "classes"), [(5, 7), (1, 1), (3, 37)])
@pytest.mark.parametrize("threads", [None, 1, 8, 64])  # 64: the last steps in warp shuffles
def test_forward_and_backward_match_torch(assert_close, device, rows, classes, threads):
    logits, targets = _problem(device, rows, classes)
    loss, lse = softmax_cross_entropy(logits, targets, threads=threads)
    reference = logits.clone().requires_grad_()
    want = functional.cross_entropy(reference, targets)
    want.backward()
    assert loss.shape == () and loss.dtype == torch.float32 and loss.device == logits.device
    assert_close(loss, want)
    assert_close(lse, torch.logsumexp(logits, dim=1))
    assert_close(softmax_cross_entropy_backward(logits, targets, lse), reference.grad)


def test_large_logits_do_not_overflow(assert_close, device):
    logits, targets = _problem(device, 4, 6, scale=1e4)
    loss, _ = softmax_cross_entropy(logits, targets)
    assert torch.isfinite(loss)
    assert_close(loss, functional.cross_entropy(logits.double(), targets))


def test_numpy_int32_targets_match_the_spec(rng, assert_close):
    logits = rng.standard_normal((6, 9)).astype(np.float32)
    targets = rng.integers(0, 9, 6).astype(np.int32)
    loss, lse = softmax_cross_entropy(logits, targets)
    want_loss, _ = softmax_cross_entropy_spec(logits, targets)
    assert isinstance(loss, np.ndarray) and loss.shape == ()
    assert_close(loss, want_loss)
    got = softmax_cross_entropy_backward(logits, targets, lse, 0.5)
    assert_close(got, softmax_cross_entropy_backward_spec(logits, targets, 0.5))


def test_grad_out_can_stay_on_the_device(assert_close, device):
    logits, targets = _problem(device, 3, 4)
    _, lse = softmax_cross_entropy(logits, targets)
    one = softmax_cross_entropy_backward(logits, targets, lse)
    assert_close(
        softmax_cross_entropy_backward(logits, targets, lse, torch.tensor(2.5, device=device)), 2.5 * one
    )


@pytest.mark.parametrize("bad", [4, -1])
def test_out_of_range_targets_are_refused_before_launch(bad):
    logits, targets = np.zeros((3, 4), np.float32), np.array([0, bad, 1])
    with pytest.raises(ValueError, match=rf"targets must be class indices in \[0, 4\).*; got {bad}"):
        softmax_cross_entropy(logits, targets)
    with pytest.raises(ValueError, match="targets must be class indices"):
        softmax_cross_entropy_backward(logits, targets, np.zeros(3, np.float32))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: softmax_cross_entropy(np.zeros((3, 4), np.float32), np.zeros(2, np.int64)),
            ValueError,
            r"targets has shape \(2,\) but logits has shape \(3, 4\)",
        ),
        (
            lambda: softmax_cross_entropy(np.zeros((3, 4), np.float32), np.zeros(3, np.float32)),
            TypeError,
            r"targets has dtype float32; allowed dtypes: int32, int64; pass targets.astype\(np.int64\)",
        ),
        (
            lambda: softmax_cross_entropy(np.zeros(4, np.float32), np.zeros(4, np.int64)),
            ValueError,
            r"logits must be 2-D, got shape \(4,\)",
        ),
        (
            lambda: softmax_cross_entropy(np.zeros((3, 4), np.float32), np.zeros(3, np.int64), threads=3),
            ValueError,
            "threads must be a power of two",
        ),
        (
            lambda: softmax_cross_entropy_backward(
                np.zeros((3, 4), np.float32), np.zeros(3, np.int64), np.zeros(2, np.float32)
            ),
            ValueError,
            r"lse has shape \(2,\) but logits has shape \(3, 4\)",
        ),
        (
            lambda: softmax_cross_entropy_backward(
                np.zeros((3, 4), np.float32),
                np.zeros(3, np.int64),
                np.zeros(3, np.float32),
                np.ones(2, np.float32),
            ),
            ValueError,
            r"grad_out must be a number or hold one element, got shape \(2,\)",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("threads", [1, 8, 32])
def test_masked_logits_count_as_zero_probability(assert_close, device, threads):
    """-inf logits (masked classes), first in the row or later, as torch treats them: exp(-inf) = 0."""
    logits, targets = _problem(device, 3, 6)
    logits[:, 0] = -torch.inf
    logits[1, 4] = -torch.inf
    targets = torch.tensor([2, 3, 5], device=device)
    loss, lse = softmax_cross_entropy(logits, targets, threads=threads)
    assert torch.isfinite(loss)
    assert_close(loss, functional.cross_entropy(logits.double(), targets))
    assert_close(lse, torch.logsumexp(logits.double(), dim=1))


@pytest.mark.parametrize("threads", [1, 8, 32])  # 8 and 32: the NaN is one thread's, combined in the tree
def test_a_nan_logit_makes_the_loss_nan(device, threads):
    logits, targets = _problem(device, 2, 5)
    logits[1, 3] = torch.nan
    loss, _ = softmax_cross_entropy(logits, targets, threads=threads)
    assert torch.isnan(loss)


def test_a_target_the_host_did_not_check_makes_the_loss_nan_not_a_bad_read(device, monkeypatch):
    """CUDA targets are checked in the kernel (no host sync): one outside [0, C) gives NaN, reads nothing."""
    from workbench.kernels import softmax_xent

    monkeypatch.setattr(softmax_xent, "_target_range", lambda t: (0, 0))  # as if unchecked on the host
    logits = torch.zeros(2, 3, device=device)
    loss, _ = softmax_cross_entropy(logits, torch.tensor([1, 7], device=device))
    assert torch.isnan(loss.cpu())
