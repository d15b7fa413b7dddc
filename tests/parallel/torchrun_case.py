"""A tiny data-parallel job for torchrun (started by test_torchrun.py): each rank saves its parameters.

torchrun --nproc-per-node 2 tests/train/torchrun_case.py OUT_DIR
"""

import json
import os
import sys
from pathlib import Path

import torch

from workbench import models
from workbench.data import ShardedLoader, load_dataset, split_dataset
from workbench.parallel import DataParallel
from workbench.train import OptimizerConfig, TrainConfig, Trainer

CONFIG = TrainConfig(epochs=2, batch_size=8, optimizer=OptimizerConfig("adam", lr=1e-2), log_every=1, seed=5)


def splits():
    return split_dataset(load_dataset("regression", n_samples=160), (1.0, 0.0, 0.0), seed=0)


def model():
    torch.manual_seed(0)
    return models.mlp(10, 1, hidden=(16,))


def reference(world_size: int) -> torch.nn.Module:
    """One process, one step per concatenation of the ranks' batches of that step."""
    net, train = model(), splits().train
    optimizer = torch.optim.Adam(net.parameters(), lr=CONFIG.optimizer.lr)
    loaders = [
        ShardedLoader(train, CONFIG.batch_size, rank=r, world_size=world_size, seed=CONFIG.seed)
        for r in range(world_size)
    ]
    for epoch in range(CONFIG.epochs):
        for loader in loaders:
            loader.set_epoch(epoch)
        for batches in zip(*loaders, strict=True):
            x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
    return net


def assert_ranks_match_reference(out: Path, world_size: int) -> None:
    """Every rank's saved parameters equal the one-process reference to 1e-5, and training moved them."""
    states = [torch.load(out / f"rank{rank}.pt") for rank in range(world_size)]
    expected_state = reference(world_size).state_dict()
    for name, expected in expected_state.items():
        for state in states:
            assert (state[name] - expected).abs().max() <= 1e-5, name
    assert not torch.equal(states[0]["1.weight"], model().state_dict()["1.weight"])  # it trained
    # ranks sharing a machine share its cores (torchrun sets OMP_NUM_THREADS=1; srun leaves torch all of them)
    threads = [json.loads((out / f"rank{rank}.json").read_text())["threads"] for rank in range(world_size)]
    assert max(threads) <= max(1, (os.cpu_count() or 1) // world_size), threads


def main(out: Path) -> None:
    strategy = DataParallel.from_env()
    net = model()
    Trainer(net, torch.nn.functional.mse_loss, splits(), CONFIG, strategy=strategy).fit()
    save_rank(out, net, strategy)
    strategy.close()


def save_rank(out: Path, net: torch.nn.Module, strategy: DataParallel) -> None:
    """The rank's trained parameters (rankN.pt), and its machine numbering and torch threads (rankN.json)."""
    torch.save(net.state_dict(), out / f"rank{strategy.rank}.pt")
    local = {"local_rank": strategy.local_rank, "local_world_size": os.environ["LOCAL_WORLD_SIZE"]}
    local["threads"] = torch.get_num_threads()
    (out / f"rank{strategy.rank}.json").write_text(json.dumps(local))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
