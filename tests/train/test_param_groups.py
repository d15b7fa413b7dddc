"""An `optimizer_factory`'s param groups train at the lrs it gave them: a backbone at a hundredth of the
head's lr (the usual fine-tuning split) keeps that ratio through warm-up, the schedule, a dashboard's Apply
and a resume, and its biases without weight decay keep none after a resume that changes it. Before, every
step gave every group the config's lr, so the backbone trained 100x faster than asked without a word, and a
factory's own ``lr=0.05`` trained at the config's 0.001."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.train import OptimizerConfig, TrainConfig, TrainControl, Trainer

X = torch.randn(96, 6, generator=torch.Generator().manual_seed(0))
DATA = TensorDataset(X, (X[:, 0] > 0).long())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU())
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class GroupLrsSeen:
    """Each logged step's lr and the lr every param group held for that step's update."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None
        self.logged: list[float] = []
        self.groups: list[list[float]] = []

    def on_step(self, event) -> None:
        self.logged.append(event["lr"])
        self.groups.append([group["lr"] for group in self.trainer.optimizer.param_groups])


def _fine_tuning(model: Net):
    def factory(params, cfg):
        backbone = {"params": model.backbone.parameters(), "lr": cfg.lr / 100}
        return torch.optim.AdamW([backbone, {"params": model.head.parameters()}], lr=cfg.lr)

    return factory


def _trainer(config: TrainConfig, factory=None, **options) -> tuple[Trainer, GroupLrsSeen]:
    model, seen = Net(), GroupLrsSeen()
    trainer = Trainer(
        model, F.cross_entropy, DATA, config, optimizer_factory=factory or _fine_tuning(model),
        callbacks=[seen], progress=False, **options,
    )  # fmt: skip
    seen.trainer = trainer
    return trainer, seen


def test_each_group_keeps_its_lr_as_a_multiple_of_the_scheduled_one():
    optimizer = OptimizerConfig("adamw", lr=1e-2, schedule="cosine", warmup_steps=2)
    trainer, seen = _trainer(TrainConfig(epochs=2, batch_size=16, optimizer=optimizer, log_every=1))
    trainer.fit()
    assert len(seen.groups) == 12
    heads = [head for _, head in seen.groups]
    assert heads == pytest.approx(seen.logged)  # the logged lr is the run's: the head's, at cfg.lr
    assert heads[0] == pytest.approx(1e-2 / 3) and max(heads) == pytest.approx(1e-2)  # warm-up, then peak
    assert heads[-1] == pytest.approx(0.0, abs=1e-12)  # cosine to 0 at the last step
    for backbone, head in seen.groups:
        assert backbone == pytest.approx(head / 100)


def test_an_applied_lr_moves_every_group_and_keeps_their_ratio():
    control = TrainControl()
    control.set_lr(0.5)  # as the dashboard's Apply does, taken at the first step boundary
    trainer, seen = _trainer(TrainConfig(epochs=1, batch_size=32, log_every=1), control=control)
    trainer.fit()
    assert seen.groups == [[pytest.approx(0.005), pytest.approx(0.5)]] * 3
    assert seen.logged == [0.5] * 3


def test_the_groups_lrs_are_the_updates_sizes():
    """The lrs held are the ones the update used: SGD moves each weight by lr × its gradient."""
    model = nn.Sequential(nn.Linear(6, 2))

    def factory(params, cfg):
        return torch.optim.SGD(
            [{"params": [model[0].weight], "lr": cfg.lr / 10}, {"params": [model[0].bias]}], lr=cfg.lr
        )

    before = [p.detach().clone() for p in model.parameters()]
    config = TrainConfig(epochs=1, batch_size=96, optimizer=OptimizerConfig("sgd", lr=0.1))
    loss = F.cross_entropy(model(X), DATA.tensors[1])
    grads = torch.autograd.grad(loss, list(model.parameters()))
    Trainer(model, F.cross_entropy, DATA, config, optimizer_factory=factory, progress=False).fit()
    moved = [(b - p.detach()) for b, p in zip(before, model.parameters(), strict=True)]
    assert torch.allclose(moved[0], 0.01 * grads[0], atol=1e-7)  # the weight at cfg.lr / 10
    assert torch.allclose(moved[1], 0.1 * grads[1], atol=1e-7)  # the bias at cfg.lr


def test_a_factory_that_sets_its_own_lr_is_refused_and_the_fix_trains_at_that_lr():
    config = TrainConfig(epochs=1, batch_size=32, log_every=1)
    with pytest.raises(ValueError) as refused:
        _trainer(config, factory=lambda params, cfg: torch.optim.RMSprop(params, lr=0.05))
    assert str(refused.value) == (
        "optimizer_factory built RMSprop with lr=0.05 (every param group), but the run's lr is the config's "
        "lr=0.001 (cfg.lr): the schedule, the logs, the dashboard and config.json go by it, and each param "
        "group keeps its lr as a multiple of it. Build it with lr=cfg.lr and set the lr in the config: "
        "OptimizerConfig(lr=0.05)"
    )
    fixed = config.replace(optimizer=OptimizerConfig(lr=0.05))
    trainer, seen = _trainer(fixed, factory=lambda params, cfg: torch.optim.RMSprop(params, lr=cfg.lr))
    trainer.fit()
    assert seen.groups == [[0.05]] * 3 and seen.logged == [0.05] * 3


def test_groups_none_of_which_is_at_the_configs_lr_are_refused_with_the_multiples_to_give():
    model = Net()

    def factory(params, cfg):
        backbone = {"params": model.backbone.parameters(), "lr": 1e-5}
        return torch.optim.SGD([backbone, {"params": model.head.parameters()}], lr=1e-3)

    config = TrainConfig(epochs=1, batch_size=32, optimizer=OptimizerConfig("sgd", lr=0.1))
    with pytest.raises(ValueError, match=r"with param groups at lr 1e-05, 0\.001, but the run's lr is the "):
        Trainer(model, F.cross_entropy, DATA, config, optimizer_factory=factory)
    with pytest.raises(ValueError) as refused:
        Trainer(model, F.cross_entropy, DATA, config, optimizer_factory=factory)
    assert str(refused.value).endswith(
        "Set the config's lr to one group's, OptimizerConfig(lr=0.001), and build the groups at multiples of "
        "cfg.lr: {'params': ..., 'lr': cfg.lr * 0.01}"
    )


def test_a_resume_that_changes_weight_decay_leaves_a_group_without_decay_without(tmp_path):
    """nanoGPT's split: weights decay, biases and norms do not; a resume with a new weight decay changes the
    decaying group only (it gave every group the new value)."""

    def no_decay_factory(model: Net):
        def factory(params, cfg):
            decay = [p for p in model.parameters() if p.dim() >= 2]
            rest = [p for p in model.parameters() if p.dim() < 2]
            groups = [{"params": decay}, {"params": rest, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)

        return factory

    def run(epochs: int, weight_decay: float) -> Trainer:
        model = Net()
        config = TrainConfig(
            epochs=epochs, batch_size=32, optimizer=OptimizerConfig("adamw", weight_decay=weight_decay)
        )
        return Trainer(
            model, F.cross_entropy, DATA, config, optimizer_factory=no_decay_factory(model), run="nd",
            runs_dir=tmp_path, progress=False,
        )  # fmt: skip

    run(1, 0.1).fit()
    resumed = run(2, 0.5)
    resumed.fit(resume=True)
    assert [group["weight_decay"] for group in resumed.optimizer.param_groups] == [0.5, 0.0]
