"""The fused SGD and Adam kernels against torch.optim over 5 steps, and against their float64 specs."""

import numpy as np
import pytest
import torch

from workbench.kernels import adam_step, adam_step_spec, sgd_step, sgd_step_spec

SHAPE = (5, 7)  # 35 elements: several per simulated thread, and a 2-D parameter read flat


def _gradients(device, steps=5):
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(SHAPE, generator=generator).to(device) for _ in range(steps)]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"weight_decay": 0.1},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    ],
)
def test_sgd_matches_torch_over_five_steps(assert_close, device, options):
    start = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(device)
    reference = torch.nn.Parameter(start.clone())
    optimizer = torch.optim.SGD([reference], lr=0.1, **options)
    param, buf = start.clone(), torch.empty_like(start)
    for step, grad in enumerate(_gradients(device)):
        reference.grad = grad.clone()
        optimizer.step()
        sgd_step(
            param, grad, buf if options.get("momentum") else None, lr=0.1, first_step=step == 0, **options
        )
    assert_close(param, reference.detach())
    if options.get("momentum"):
        assert_close(buf, optimizer.state[reference]["momentum_buffer"])


@pytest.mark.parametrize(
    ("optimizer_class", "options"),
    [
        (torch.optim.Adam, {}),
        (torch.optim.Adam, {"weight_decay": 0.1}),
        (torch.optim.AdamW, {"weight_decay": 0.1}),
        (torch.optim.Adam, {"betas": (0.3, 0.9), "eps": 1e-3}),  # β1 < 0.5: torch's other lerp formula
    ],
)
def test_adam_and_adamw_match_torch_over_five_steps(assert_close, device, optimizer_class, options):
    start = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(device)
    reference = torch.nn.Parameter(start.clone())
    optimizer = optimizer_class([reference], lr=0.01, **options)
    param, exp_avg, exp_avg_sq = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
    beta1, beta2 = options.get("betas", (0.9, 0.999))
    for step, grad in enumerate(_gradients(device), start=1):
        reference.grad = grad.clone()
        optimizer.step()
        adam_step(
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            step=step,
            lr=0.01,
            beta1=beta1,
            beta2=beta2,
            eps=options.get("eps", 1e-8),
            weight_decay=options.get("weight_decay", 0.0),
            decoupled=optimizer_class is torch.optim.AdamW,
        )
    state = optimizer.state[reference]
    assert_close(param, reference.detach())
    assert_close(exp_avg, state["exp_avg"])
    assert_close(exp_avg_sq, state["exp_avg_sq"])


@pytest.mark.parametrize("first_step", [True, False])
def test_sgd_matches_its_spec(rng, assert_close, first_step):
    p, g, b = (rng.standard_normal(1025).astype(np.float32) for _ in range(3))
    options = {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.02, "first_step": first_step}
    want_p, want_b = sgd_step_spec(p, g, b, **options)
    sgd_step(p, g, b, **options)
    assert_close(p, want_p)
    assert_close(b, want_b)


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_matches_its_spec(rng, assert_close, decoupled):
    p, g = (rng.standard_normal(1000).astype(np.float32) for _ in range(2))
    m = rng.standard_normal(1000).astype(np.float32)
    v = rng.random(1000).astype(np.float32)
    options = {"step": 3, "lr": 0.01, "weight_decay": 0.1, "decoupled": decoupled}
    want = adam_step_spec(p, g, m, v, **options)
    adam_step(p, g, m, v, **options)
    for got, expected in zip((p, m, v), want, strict=True):
        assert_close(got, expected)


def test_length_one_buffers(assert_close):
    p, g = np.array([1.0], np.float32), np.array([0.5], np.float32)
    sgd_step(p, g, lr=0.1)
    assert_close(p, [0.95])


def _ones(n=3):
    return np.ones(n, np.float32)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sgd_step(_ones(), _ones(), lr=-1), "lr must be a finite number ≥ 0, got -1"),
        (lambda: sgd_step(_ones(), _ones(), lr=0.1, nesterov=True), "nesterov=True needs momentum > 0"),
        (lambda: sgd_step(_ones(), _ones(), lr=0.1, momentum=0.9), "momentum=0.9 needs a momentum_buf"),
        (lambda: sgd_step(_ones(), _ones(4), lr=0.1), r"grad has shape \(4,\) but param has shape \(3,\)"),
        (
            lambda: sgd_step(_ones(), _ones(), _ones(2), lr=0.1, momentum=0.9),
            r"momentum_buf has shape \(2,\) but param has shape \(3,\)",
        ),
        (lambda: adam_step(*[_ones()] * 4, step=0, lr=0.1), "step must be an integer ≥ 1, got 0"),
        (lambda: adam_step(*[_ones()] * 4, step=1, lr=0.1, beta1=1.0), r"beta1 must be in \[0, 1\), got 1.0"),
        (
            lambda: adam_step(_ones(), _ones(), _ones(), _ones(5), step=1, lr=0.1),
            r"exp_avg_sq has shape \(5,\) but param has shape \(3,\)",
        ),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
