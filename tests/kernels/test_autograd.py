"""NumbaLinear and the numba cross-entropy inside autograd: values and gradients against torch's."""

import pytest
import torch
from torch import nn
from torch.nn import functional

from workbench.kernels import (
    NumbaCrossEntropyLoss,
    NumbaLinear,
    matmul,
    numba_cross_entropy,
    softmax_cross_entropy,
)


def _twin(layer: NumbaLinear) -> nn.Linear:
    """An nn.Linear with the same parameters."""
    twin = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    with torch.no_grad():
        twin.weight.copy_(layer.weight)
        if layer.bias is not None:
            twin.bias.copy_(layer.bias)
    return twin.to(layer.weight.device)


@pytest.mark.parametrize(
    ("method", "features", "rows"),
    [
        ("register", (5, 3), 7),
        ("tiled", (5, 3), 7),
        ("naive", (5, 3), 7),
        ("vector", (5, 3), 7),  # sizes not multiples of 4: the register kernel
        ("vector", (8, 4), 6),  # 12×8 inputs, 4 outputs: every matmul of forward and backward vectorized
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_nn_linear(assert_close, device, method, features, rows, bias):
    torch.manual_seed(0)
    layer = NumbaLinear(*features, bias=bias, method=method).to(device)
    twin = _twin(layer)
    x = torch.randn(2, rows, features[0], device=device)  # leading dimensions are flattened, then restored
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_theirs = layer(x_ours), twin(x_theirs)
    assert y_ours.shape == (2, rows, features[1])
    assert_close(y_ours, y_theirs)
    weights = torch.randn_like(y_theirs)  # a loss whose gradient is not uniform
    (y_ours * weights).sum().backward()
    (y_theirs * weights).sum().backward()
    assert_close(x_ours.grad, x_theirs.grad)
    assert_close(layer.weight.grad, twin.weight.grad)
    if bias:
        assert_close(layer.bias.grad, twin.bias.grad)


def test_same_initialisation_as_nn_linear():
    torch.manual_seed(3)
    ours = NumbaLinear(4, 2)
    torch.manual_seed(3)
    theirs = nn.Linear(4, 2)
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)
    assert "method='register'" in repr(ours)


def test_cross_entropy_matches_torch(assert_close, device):
    torch.manual_seed(0)
    logits = torch.randn(6, 5, device=device)
    target = torch.randint(0, 5, (6,), device=device)
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = NumbaCrossEntropyLoss()(ours, target)
    want = functional.cross_entropy(theirs, target)
    assert_close(loss, want)
    (3 * loss).backward()
    (3 * want).backward()
    assert_close(ours.grad, theirs.grad)


def _mlp(device, linear):
    torch.manual_seed(0)
    return nn.Sequential(linear(4, 8), nn.ReLU(), linear(8, 3)).to(device)


def test_mlp_gradients_match_torch_and_training_lowers_the_loss(assert_close, device):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=generator).to(device)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 3 classes
    ours, theirs = _mlp(device, NumbaLinear), _mlp(device, nn.Linear)
    numba_cross_entropy(ours(x), y).backward()
    functional.cross_entropy(theirs(x), y).backward()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert_close(p.grad, q.grad)
    optimizer = torch.optim.SGD(ours.parameters(), lr=0.5)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss = numba_cross_entropy(ours(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_gradients_match_float32_finite_differences(device):
    """Central differences of the whole loss in float32: a check that needs no reference implementation."""
    torch.manual_seed(0)
    layer = NumbaLinear(3, 4).to(device)
    x = torch.randn(5, 3, device=device)
    target = torch.tensor([0, 1, 2, 3, 1], device=device)
    numba_cross_entropy(layer(x), target).backward()
    step = 1e-2
    with torch.no_grad():
        for index in [(0, 0), (1, 2), (3, 1)]:
            saved = layer.weight[index].item()
            layer.weight[index] = saved + step
            up = numba_cross_entropy(layer(x), target).item()
            layer.weight[index] = saved - step
            down = numba_cross_entropy(layer(x), target).item()
            layer.weight[index] = saved
            assert abs((up - down) / (2 * step) - layer.weight.grad[index].item()) < 2e-3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: NumbaLinear(0, 2), "in_features must be an integer ≥ 1, got 0"),
        (lambda: NumbaLinear(2, 0), "out_features must be an integer ≥ 1, got 0"),
        (lambda: NumbaLinear(2, 2, method="fast"), "method='fast' is not supported"),
    ],
)
def test_bad_layers_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_input_width_must_match(device):
    with pytest.raises(ValueError, match=r"x has shape \(2, 4\); its last dimension must be 3"):
        NumbaLinear(3, 2).to(device)(torch.ones(2, 4, device=device))


@pytest.mark.parametrize(
    ("transpose_a", "transpose_b"), [(False, False), (False, True), (True, False), (True, True)]
)
@pytest.mark.parametrize("method", ["register", "tiled"])
def test_matmul_on_tensors_that_require_grad_joins_autograd(
    assert_close, device, method, transpose_a, transpose_b
):
    torch.manual_seed(0)
    a = torch.randn((3, 5) if transpose_a else (5, 3), device=device, requires_grad=True)
    b = torch.randn((4, 3) if transpose_b else (3, 4), device=device, requires_grad=True)
    a_twin, b_twin = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    weights = torch.randn(5, 4, device=device)  # a loss whose gradient is not uniform
    ours = matmul(a, b, method=method, transpose_a=transpose_a, transpose_b=transpose_b)
    theirs = (a_twin.T if transpose_a else a_twin) @ (b_twin.T if transpose_b else b_twin)
    assert_close(ours, theirs)
    (ours * weights).sum().backward()
    (theirs * weights).sum().backward()
    assert_close(a.grad, a_twin.grad)
    assert_close(b.grad, b_twin.grad)


def test_matmul_records_a_graph_only_when_one_is_needed(device):
    w = torch.ones(3, 2, device=device, requires_grad=True)
    x = torch.ones(4, 3, device=device)
    y = matmul(x, w)
    assert y.requires_grad
    y.sum().backward()  # x needs no gradient: only w's is computed
    assert x.grad is None and w.grad.tolist() == [[4.0, 4.0]] * 3
    with torch.no_grad():
        assert matmul(x, w).grad_fn is None
    assert matmul(x, w.detach()).grad_fn is None


def test_raw_softmax_cross_entropy_loss_backpropagates(assert_close, device):
    torch.manual_seed(0)
    logits = torch.randn(6, 5, device=device, requires_grad=True)
    target = torch.randint(0, 5, (6,), device=device)
    twin = logits.detach().clone().requires_grad_()
    loss, lse = softmax_cross_entropy(logits, target)
    assert not lse.requires_grad
    loss.backward()
    functional.cross_entropy(twin, target).backward()
    assert_close(logits.grad, twin.grad)
    with torch.no_grad():
        assert softmax_cross_entropy(logits, target)[0].grad_fn is None
