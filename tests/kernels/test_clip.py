"""Gradient clipping against torch.nn.utils and the float64 specs."""

import numpy as np
import pytest
import torch

from workbench.kernels import clip_grad_norm, clip_grad_norm_spec, clip_grad_value, clip_grad_value_spec

SHAPES = [(17,), (3, 5), (1,)]


def _grads(device):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator).to(device) for shape in SHAPES]


def _parameters_with(grads):
    """torch's clipping works on parameters' .grad: parameters holding copies of `grads`."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    return params


@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipped, and left alone
def test_clip_grad_norm_matches_torch(assert_close, device, max_norm):
    ours = _grads(device)
    theirs = _parameters_with(ours)
    norm = clip_grad_norm(ours, max_norm)
    want = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert isinstance(norm, float)
    assert abs(norm - float(want)) <= 1e-5 * float(want)
    for got, expected in zip(ours, theirs, strict=True):
        assert_close(got, expected.grad)
    if max_norm > norm:
        assert all(torch.equal(g, s) for g, s in zip(ours, _grads(device), strict=True))


def test_clip_grad_norm_matches_its_spec(rng, assert_close):
    grads = [rng.standard_normal(n).astype(np.float32) for n in (1000, 1025, 1)]
    want, want_norm = clip_grad_norm_spec(grads, 1.0)
    norm = clip_grad_norm(grads, 1.0, threads=4, blocks=3)
    assert abs(norm - want_norm) <= 1e-5 * want_norm
    for got, expected in zip(grads, want, strict=True):
        assert_close(got, expected)


def test_one_array_is_a_list_of_one():
    g = np.array([3.0, 4.0], np.float32)
    assert clip_grad_norm(g, 1.0) == 5.0
    np.testing.assert_allclose(g, [0.6, 0.8], rtol=1e-6)


def test_clip_grad_value_matches_torch_and_its_spec(assert_close, device):
    ours = _grads(device)
    theirs = _parameters_with(ours)
    want = clip_grad_value_spec([g.cpu() for g in ours], 0.5)
    clip_grad_value(ours, 0.5)
    torch.nn.utils.clip_grad_value_(theirs, 0.5)
    for got, expected, spec in zip(ours, theirs, want, strict=True):
        assert torch.equal(got, expected.grad)
        assert_close(got, spec)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: clip_grad_norm([np.ones(2, np.float32)], -1), ValueError, "max_norm must be a number ≥ 0"),
        (lambda: clip_grad_norm([], 1.0), ValueError, "grads is empty"),
        (
            lambda: clip_grad_value([np.ones(2, np.float32)], -0.5),
            ValueError,
            "clip_value must be a number ≥ 0",
        ),
        (
            lambda: clip_grad_norm([np.ones(2, np.float32), np.ones(2)], 1.0),
            TypeError,
            r"grads\[1\] has dtype float64; allowed dtypes: float32",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_clipping_without_asking_for_the_norm_never_reads_it_back(device, monkeypatch):
    from workbench.kernels import clip

    def no_reads(buffer):
        raise AssertionError("the norm was read back (a host sync on a GPU)")

    monkeypatch.setattr(clip, "read_scalar", no_reads)
    grads = [torch.full((5,), 3.0, device=device), torch.full((3,), 4.0, device=device)]
    assert clip.clip_grad_norm(grads, 1.0, return_norm=False) is None
    assert abs(float(torch.cat(grads).norm()) - 1.0) < 1e-5
