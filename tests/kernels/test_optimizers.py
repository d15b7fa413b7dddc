"""FusedSGD and FusedAdam against torch.optim, their state dicts, and training through the Trainer; one launch
per param group whatever its number of tensors, clipping inside Adam's launch, and gradients that code
replaces or sets to None."""

import copy
import types

import pytest
import torch
from torch import nn

from workbench.kernels import FusedAdam, FusedSGD, fused_optimizer_factory
from workbench.presets import build_experiment
from workbench.train import OptimizerConfig, Trainer


def _model(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(device)


def _train(model, optimizer, device, steps=5, lr_change=None):
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(4, 3, generator=generator).to(device)
        optimizer.zero_grad()
        model(x).square().mean().backward()
        if lr_change is not None and step == 2:
            for group in optimizer.param_groups:
                group["lr"] = lr_change
        optimizer.step()


@pytest.mark.parametrize(
    ("ours", "theirs", "options"),
    [
        (FusedSGD, torch.optim.SGD, {"lr": 0.1}),
        (FusedSGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        (FusedAdam, torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1}),
        (FusedAdam, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    ],
)
def test_five_steps_match_torch_optim(assert_close, device, ours, theirs, options):
    extra = {"decoupled": True} if theirs is torch.optim.AdamW else {}
    model, twin = _model(device), _model(device)
    _train(model, ours(model.parameters(), **options, **extra), device, lr_change=0.03)
    _train(twin, theirs(twin.parameters(), **options), device, lr_change=0.03)  # lr read at every step
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(p, q)


def test_param_groups_keep_their_own_lr(assert_close, device):
    model, twin = _model(device), _model(device)
    groups = [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].parameters()}]
    twin_groups = [{"params": twin[0].parameters(), "lr": 0.1}, {"params": twin[2].parameters()}]
    _train(model, FusedSGD(groups, lr=0.01, momentum=0.5), device)
    _train(twin, torch.optim.SGD(twin_groups, lr=0.01, momentum=0.5), device)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(p, q)


def test_state_dict_round_trip_and_torch_compatibility(assert_close, device):
    model = _model(device)
    optimizer = FusedAdam(model.parameters(), lr=0.01)
    _train(model, optimizer, device, steps=2)
    state = copy.deepcopy(optimizer.state_dict())  # as a checkpoint saved and loaded would hold it
    assert sorted(state["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert float(state["state"][0]["step"]) == 2.0
    twin = _model(device)
    twin.load_state_dict(model.state_dict())
    resumed = FusedAdam(twin.parameters(), lr=0.01)
    resumed.load_state_dict(state)
    _train(model, optimizer, device, steps=3)
    _train(twin, resumed, device, steps=3)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
    reference = torch.optim.Adam(_model(device).parameters(), lr=0.01)
    reference.load_state_dict(state)  # the same layout as torch.optim.Adam
    assert_close(reference.state_dict()["state"][1]["exp_avg"], state["state"][1]["exp_avg"])


@pytest.mark.parametrize(
    ("ours", "theirs", "options"),
    [
        (FusedAdam, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
        (FusedSGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    ],
)
def test_a_torch_optimizer_state_dict_continues_in_the_fused_one(assert_close, device, ours, theirs, options):
    model = _model(device)
    reference = theirs(model.parameters(), **options)
    _train(model, reference, device, steps=2)
    twin = _model(device)
    twin.load_state_dict(model.state_dict())
    fused = ours(twin.parameters(), lr=1.0)  # everything but the parameters comes from the state dict
    fused.load_state_dict(copy.deepcopy(reference.state_dict()))
    _train(model, reference, device, steps=3)
    _train(twin, fused, device, steps=3)
    for p, q in zip(twin.parameters(), model.parameters(), strict=True):
        assert_close(p, q)


def test_momentum_buffers_saved_as_none_start_afresh_as_torch_starts_them(assert_close, device):
    # torch ≤ 2.0 saved {"momentum_buffer": None} for every parameter of a momentum-free SGD; a run resumed
    # from such a checkpoint with momentum turned on starts the buffers from the next gradients
    state = {"state": {0: {"momentum_buffer": None}, 1: {"momentum_buffer": None},
                       2: {"momentum_buffer": None}, 3: {"momentum_buffer": None}},
             "param_groups": [{"lr": 0.1, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False,
                               "maximize": False, "foreach": None, "differentiable": False, "fused": None,
                               "params": [0, 1, 2, 3]}]}  # fmt: skip
    model, twin = _model(device), _model(device)
    fused, reference = FusedSGD(model.parameters(), lr=0.1), torch.optim.SGD(twin.parameters(), lr=0.1)
    for optimizer in (fused, reference):
        optimizer.load_state_dict(copy.deepcopy(state))
        optimizer.param_groups[0]["momentum"] = 0.9
    _train(model, fused, device, steps=3)
    _train(twin, reference, device, steps=3)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(p, q)
    assert all(fused.state[p]["momentum_buffer"] is not None for p in model.parameters())


@pytest.mark.parametrize(
    ("ours", "theirs", "option"),
    [(FusedAdam, torch.optim.Adam, "amsgrad"), (FusedSGD, torch.optim.SGD, "dampening")],
)
def test_loading_an_unsupported_option_is_refused(ours, theirs, option):
    options = {"amsgrad": True} if option == "amsgrad" else {"momentum": 0.9, "dampening": 0.5}
    state = theirs(nn.Linear(2, 1).parameters(), lr=0.1, **options).state_dict()
    with pytest.raises(ValueError, match=f"{ours.__name__} does not support {option}="):
        ours(nn.Linear(2, 1).parameters()).load_state_dict(state)


def test_closure_is_called_with_gradients_enabled(device):
    model = _model(device)
    optimizer = FusedSGD(model.parameters(), lr=0.1)
    x = torch.ones(2, 3, device=device)

    def closure():
        optimizer.zero_grad()
        loss = model(x).sum()
        loss.backward()
        return loss

    assert isinstance(optimizer.step(closure), torch.Tensor)


@pytest.mark.parametrize(
    ("config", "expected", "defaults"),
    [
        (OptimizerConfig("sgd", lr=0.1, momentum=0.9, nesterov=True), FusedSGD, {"nesterov": True}),
        (OptimizerConfig("adam", lr=1e-3, weight_decay=0.1), FusedAdam, {"decoupled": False}),
        (
            OptimizerConfig("adamw", lr=1e-3, betas=(0.8, 0.99)),
            FusedAdam,
            {"decoupled": True, "betas": (0.8, 0.99)},
        ),
    ],
)
def test_factory_maps_the_optimizer_config(config, expected, defaults):
    optimizer = fused_optimizer_factory(nn.Linear(2, 1).parameters(), config)
    assert type(optimizer) is expected and optimizer.defaults["lr"] == config.lr
    assert optimizer.defaults["weight_decay"] == config.weight_decay
    assert {key: optimizer.defaults[key] for key in defaults} == defaults


def test_trainer_trains_with_the_fused_optimizer(tmp_path, device):
    experiment = build_experiment(
        "regression-linear",
        n_samples=160,
        epochs=2,
        batch_size=32,
        optimizer="adam",
        lr=0.1,
        device=device.type,
    )
    trainer = Trainer(
        experiment.model,
        experiment.loss_fn,
        experiment.splits,
        experiment.config,
        optimizer_factory=fused_optimizer_factory,
        run="fused",
        runs_dir=tmp_path,
    )
    assert isinstance(trainer.optimizer, FusedAdam)
    before = trainer.evaluate("val")["loss"]
    result = trainer.fit()
    assert result.status == "finished" and result.step == 8
    assert result.metrics["val"]["loss"] < 0.5 * before
    assert (tmp_path / "fused" / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: FusedSGD(p, lr=-0.1), "lr must be a finite number ≥ 0"),
        (lambda p: FusedSGD(p, momentum=-1), "momentum must be a finite number ≥ 0"),
        (lambda p: FusedSGD(p, weight_decay=-1), "weight_decay must be a finite number ≥ 0"),
        (lambda p: FusedSGD(p, nesterov=True), "nesterov=True needs momentum > 0"),
        (lambda p: FusedAdam(p, eps=-1), "eps must be a finite number ≥ 0"),
        (lambda p: FusedAdam(p, betas=(0.9,)), r"betas must be a pair \(beta1, beta2\)"),
        (lambda p: FusedAdam(p, betas=(0.9, 1.0)), r"betas\[1\] must be in \[0, 1\), got 1.0"),
        (lambda p: FusedAdam(p, max_grad_norm=-1), "max_grad_norm must be a number ≥ 0"),
        (
            lambda p: fused_optimizer_factory(p, types.SimpleNamespace(name="rmsprop")),
            "optimizer_config.name='rmsprop' is not supported; allowed values: 'sgd', 'adam', 'adamw'",
        ),
    ],
)
def test_bad_hyperparameters_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make(nn.Linear(2, 1).parameters())


def _deep(device, layers=12):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), *(nn.Linear(4, 4) for _ in range(layers - 1))).to(device)


def _count_launches(monkeypatch):
    """Every kernel launch of the optimizers and the norm's reduction, by kernel name."""
    from workbench.kernels import optim_kernels, reduce

    launched = []
    for module in (optim_kernels, reduce):
        real = module.launch

        def counting(kernel, *args, real=real):
            launched.append(getattr(kernel, "__name__", None) or kernel.py_func.__name__)
            real(kernel, *args)

        monkeypatch.setattr(module, "launch", counting)
    return launched


@pytest.mark.parametrize(
    "make",
    [
        lambda params: FusedAdam(params, lr=0.01, max_grad_norm=0.5),
        lambda params: FusedSGD(params, lr=0.1, momentum=0.9),
    ],
    ids=["adam clipped", "sgd momentum"],
)
def test_a_step_is_one_launch_per_group_whatever_its_number_of_tensors(device, monkeypatch, make):
    model = _deep(device)  # 24 tensors
    optimizer = make(model.parameters())
    flat = optimizer.flat[0]
    assert all(
        p.data_ptr() == view.data_ptr()
        for p, view in zip(model.parameters(), flat.views(flat.param), strict=True)
    )
    launched = _count_launches(monkeypatch)
    _train(model, optimizer, device, steps=3)
    per_step = ["reduce", "adam"] if isinstance(optimizer, FusedAdam) else ["sgd"]
    assert launched == per_step * 3  # tensor by tensor, it was 24 (Adam: 24 + 48 with clipping) per step
    assert all(
        p.grad.data_ptr() == view.data_ptr()
        for p, view in zip(model.parameters(), flat.views(flat.grad), strict=True)
    )


def test_clipping_inside_the_launch_matches_clip_grad_norm_then_adam(assert_close, device):
    model, twin = _deep(device, layers=3), _deep(device, layers=3)
    ours = FusedAdam(model.parameters(), lr=0.01, max_grad_norm=0.05)
    theirs = torch.optim.Adam(twin.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        x = (10 * torch.randn(8, 3, generator=generator)).to(device)
        for net, optimizer in ((model, ours), (twin, theirs)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
        unclipped = [p.grad.clone() for p in model.parameters()]
        norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.05)
        ours.step()
        theirs.step()
        assert norm > 0.05  # clipping did something
        assert ours.grad_norm() == pytest.approx(float(norm), rel=1e-5)
        assert all(
            torch.equal(p.grad, g) for p, g in zip(model.parameters(), unclipped, strict=True)
        )  # .grad unscaled
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(p, q, rtol=1e-4)


@pytest.mark.parametrize(
    ("ours", "theirs", "options"),
    [
        (FusedAdam, torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1}),
        (FusedSGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    ],
)
def test_gradients_replaced_or_set_to_none_are_taken_as_torch_takes_them(
    assert_close, device, ours, theirs, options
):
    """Step 2: code replaces one .grad with its own tensor and sets another to None (torch skips that
    parameter); the counts part, and every later step still matches torch.optim."""
    model, twin = _model(device), _model(device)
    fused, reference = ours(model.parameters(), **options), theirs(twin.parameters(), **options)
    generator = torch.Generator().manual_seed(2)
    for step in range(5):
        x = torch.randn(4, 3, generator=generator).to(device)
        for net, optimizer in ((model, fused), (twin, reference)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            if step == 2:
                net[0].weight.grad = net[0].weight.grad * 3  # a tensor of its own
                net[2].bias.grad = None
        fused.step()
        reference.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert_close(p, q)
    if ours is FusedAdam:
        assert [float(fused.state[p]["step"]) for p in model.parameters()] == [5.0, 5.0, 5.0, 4.0]


def test_frozen_parameters_stay_out_of_the_buffer_and_are_never_updated(device):
    model = _model(device)
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    optimizer = FusedAdam(model.parameters(), lr=0.1)
    _train(model, optimizer, device, steps=2)
    assert torch.equal(model[0].weight, frozen)
    assert optimizer.flat[0].param.numel() == 5 + 10 + 2


def test_parameters_it_cannot_pack_are_refused_with_the_fix():
    with pytest.raises(
        TypeError,
        match=r"FusedAdam updates float32 parameters; parameter 0 is torch.float64 \(use .float\(\)\)",
    ):
        FusedAdam(nn.Linear(2, 1).double().parameters())
    with pytest.raises(ValueError, match="no parameter of this group requires a gradient"):
        FusedSGD([nn.Parameter(torch.ones(2), requires_grad=False)])


@pytest.mark.parametrize(
    "make", [lambda ps: FusedAdam(ps, lr=1e-2), lambda ps: FusedSGD(ps, lr=0.1, momentum=0.9)]
)
def test_a_group_views_its_buffers_for_numba_once(device, monkeypatch, make):
    """A numba view of a tensor costs ~25 µs of host time: the buffers a group keeps are viewed at its first
    step and not again, until a loaded state dict brings new ones; the updates still match torch's."""
    from workbench.kernels import _numba

    made = []
    view = _numba._view_of_tensor
    monkeypatch.setattr(_numba, "_view_of_tensor", lambda t: made.append(t.shape) or view(t))
    model = _model(device)
    reference = copy.deepcopy(model)
    optimizer = make(model.parameters())
    _train(model, optimizer, device, steps=1)
    first = len(made)
    _train(model, optimizer, device, steps=3)
    assert first >= 2 and len(made) == first
    optimizer.load_state_dict(optimizer.state_dict())
    _train(model, optimizer, device, steps=1)
    assert len(made) > first
    torch_optimizer = (torch.optim.Adam if isinstance(optimizer, FusedAdam) else torch.optim.SGD)(
        reference.parameters(), **{k: v for k, v in optimizer.defaults.items() if k in ("lr", "momentum")}
    )
    for steps in (1, 3, 1):  # as ours ran: each call draws the same inputs from its start
        _train(reference, torch_optimizer, device, steps=steps)
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
