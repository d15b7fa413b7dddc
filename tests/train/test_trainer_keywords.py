"""A keyword the Trainer does not take, as people who come from a hand loop, Lightning or Hugging Face write
it (`optimizer=torch.optim.AdamW(...)`, `scheduler=`, `max_epochs=`, `train_dataset=`), says what it was
meant to be and the line to write (Python said only "unexpected keyword argument 'optimizer'"); the printed
line, pasted, trains with the optimizer that was meant."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.data import LoaderConfig
from workbench.train import OptimizerConfig, TrainConfig, Trainer

X = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
DATA = TensorDataset(X, (X[:, 0] > 0).long())
MODEL = nn.Linear(8, 2)
CONFIG = TrainConfig(epochs=1, batch_size=16)
TAKES = (
    "model, loss_fn, splits, config, step_fn, metrics, callbacks, control, run, runs_dir, optimizer_factory"
)


@pytest.mark.parametrize(
    ("keywords", "given_config", "said"),
    [
        (
            {"optimizer": torch.optim.AdamW(MODEL.parameters(), lr=3e-4)}, False,
            "optimizer: it builds the optimizer itself, on the parameters it trains (DDP and FSDP wrap them "
            "first); write config=TrainConfig(optimizer=OptimizerConfig('adamw', lr=0.0003, "
            "weight_decay=0.01))",
        ),
        (
            {"optimizer": torch.optim.SGD(MODEL.parameters(), lr=0.1, momentum=0.9)}, True,
            "optimizer: it builds the optimizer itself, on the parameters it trains (DDP and FSDP wrap them "
            "first); write config=config.replace(optimizer={'name': 'sgd', 'lr': 0.1, 'momentum': 0.9})",
        ),
        (
            {"optimizer": torch.optim.RMSprop(MODEL.parameters())}, False,
            "optimizer: it builds the optimizer itself, on the parameters it trains (DDP and FSDP wrap them "
            "first); write config=TrainConfig(optimizer=OptimizerConfig('adam', lr=0.01)), "
            "optimizer_factory=lambda params, cfg: torch.optim.RMSprop(params, lr=cfg.lr)",
        ),
        ({"optimizer": "Adam"}, False, "write config=TrainConfig(optimizer=OptimizerConfig('adam'))"),
        (
            {"optimizer": OptimizerConfig("sgd", lr=0.1)}, False,
            "write config=TrainConfig(optimizer=OptimizerConfig('sgd', lr=0.1))",
        ),
        (
            {"lr_scheduler": object()}, True,
            "lr_scheduler: the lr schedule is OptimizerConfig's schedule ('constant', 'cosine' or 'linear', "
            "to 0 at the last step) after warmup_steps of linear warm-up; write config=config.replace("
            "optimizer={'schedule': 'cosine', 'warmup_steps': 100})",
        ),
        (
            {"max_epochs": 3}, False,
            "max_epochs: max_epochs is TrainConfig's epochs; write config=TrainConfig(epochs=3)",
        ),
        ({"epochs": 3}, True, "epochs: epochs is in TrainConfig; write config=config.replace(epochs=3)"),
        (
            {"lr": 0.01}, False,
            "lr: lr is in OptimizerConfig; write config=TrainConfig(optimizer=OptimizerConfig('adam', "
            "lr=0.01))",
        ),
        (
            {"num_workers": 2}, False,
            "num_workers: num_workers is in LoaderConfig; write config=TrainConfig(loader=LoaderConfig("
            "num_workers=2))",
        ),
        (
            {"train_dataset": DATA}, False,
            "train_dataset: the data is the third argument, splits: Trainer(model, loss_fn, (train, val), "
            "config)",
        ),
        (
            {"accelerator": "gpu"}, False,
            "accelerator: the device is TrainConfig's device ('auto': the GPU when there is one); write "
            "config=TrainConfig(device='cuda'); for several GPUs, run it under launch(...)",
        ),
        ({"metric": {}}, False, f"metric; did you mean metrics=?; it takes {TAKES}"),
    ],
    ids=[
        "AdamW", "SGD with a config", "RMSprop", "a name", "an OptimizerConfig", "lr_scheduler", "max_epochs",
        "epochs with a config", "lr", "num_workers", "train_dataset", "accelerator", "a typo",
    ],
)  # fmt: skip
def test_a_keyword_from_another_trainer_says_what_to_write(keywords, given_config, said):
    config = {"config": CONFIG} if given_config else {}
    with pytest.raises(TypeError, match=r"^Trainer\(\) takes no argument ") as refused:
        Trainer(MODEL, F.cross_entropy, (DATA, DATA), **config, **keywords)
    assert said in str(refused.value)


def _printed(keywords: dict, given_config: bool) -> str:
    config = {"config": CONFIG} if given_config else {}
    with pytest.raises(TypeError) as refused:
        Trainer(MODEL, F.cross_entropy, DATA, **config, **keywords)
    return re.search(r"; write (.*)$", str(refused.value))[1]


@pytest.mark.parametrize("given_config", [False, True], ids=["without a config", "with a config"])
@pytest.mark.parametrize(
    "mine",
    [
        torch.optim.SGD(MODEL.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4),
        torch.optim.RMSprop(MODEL.parameters(), lr=0.05, momentum=0.9, alpha=0.9),
    ],
    ids=["SGD", "RMSprop"],
)
def test_the_printed_line_pasted_trains_with_the_optimizer_that_was_meant(mine, given_config):
    """Every setting of the optimizer given, the lr included, is the one each step uses (an RMSprop's lr
    was printed as the factory's own, which the steps replaced with the config's 0.001)."""
    printed = _printed({"optimizer": mine}, given_config)
    namespace = {"OptimizerConfig": OptimizerConfig, "TrainConfig": TrainConfig, "LoaderConfig": LoaderConfig}
    namespace |= {"config": CONFIG, "torch": torch}
    trainer = Trainer(MODEL, F.cross_entropy, DATA, **eval(f"dict({printed})", namespace))
    assert type(trainer.optimizer) is type(mine)
    assert trainer.fit().status == "finished"
    used = trainer.optimizer.param_groups[0]  # the lr the last step used: the schedule is constant
    for setting, value in mine.defaults.items():
        if setting not in ("fused", "foreach"):  # the implementation: the Trainer picks fused where it can
            assert used[setting] == value, setting


@pytest.mark.parametrize(
    ("attribute", "here"),
    [
        ("validate", "trainer.evaluate('val') evaluates the val split"),
        ("test", "trainer.evaluate('test') evaluates the test split"),
        ("global_step", "trainer.step counts the optimizer steps taken"),
    ],
)
def test_another_trainers_method_says_what_stands_for_it_here(attribute, here):
    trainer = Trainer(MODEL, F.cross_entropy, (DATA, DATA), CONFIG)
    with pytest.raises(
        AttributeError, match=f"^'Trainer' object has no attribute '{attribute}': "
    ) as missing:
        getattr(trainer, attribute)
    assert here in str(missing.value)
    what_stands = here.split(" ")[0].removeprefix("trainer.").split("(")[0]
    if what_stands in ("evaluate", "step"):
        assert hasattr(trainer, what_stands)  # what it names is there
    assert not hasattr(trainer, "no_such_thing")  # any other attribute is missing as before
    with pytest.raises(AttributeError, match=r"^'Trainer' object has no attribute 'no_such_thing'$"):
        trainer.no_such_thing  # noqa: B018
