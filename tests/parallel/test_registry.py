"""One registry of strategy names, read by the CLI, the estimators and the Estimator widget."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workbench.parallel import STRATEGIES, strategy_spec
from workbench.parallel.strategies.distributed import DistributedStrategy
from workbench.parallel.strategies.registry import DISTRIBUTED
from workbench.train import SingleDevice


def test_every_name_loads_its_class_or_builder():
    built = {name: spec.load()() for name, spec in STRATEGIES.items()}  # what --strategy NAME builds
    assert type(built["single"]) is SingleDevice
    assert all(isinstance(s, DistributedStrategy) for name, s in built.items() if name != "single")


@pytest.mark.parametrize("name", DISTRIBUTED)
def test_shards_data_agrees_with_the_strategy_itself(name):
    strategy = STRATEGIES[name].load()()
    strategy.world_size = 4  # as if bound to 4 ranks (the data split depends only on that)
    assert STRATEGIES[name].shards_data == (strategy.data_world_size > 1)  # compositions: 2 groups of 2


def test_unknown_names_are_refused_with_the_list():
    with pytest.raises(ValueError, match="strategy='zero' is not supported; allowed values: 'single', 'ddp'"):
        strategy_spec("zero")


def test_cli_and_estimator_widget_offer_exactly_the_registered_names(capsys):
    import torch

    from workbench.cli import main
    from workbench.widgets.estimator import Estimator

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--strategy {" + ",".join(STRATEGIES) + "}" in capsys.readouterr().out
    estimator = Estimator(torch.nn.Linear(4, 2), torch.zeros(1, 4), samples_per_epoch=10)
    assert list(estimator.strategy.options) == list(STRATEGIES)


def test_the_registry_imports_neither_torch_nor_torch_distributed():
    code = (
        "import sys; import workbench.parallel.strategies.registry as r; r.strategy_spec('fsdp'); "
        "print('torch' in sys.modules, 'torch.distributed' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
