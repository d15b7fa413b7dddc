"""Memory estimates against the real allocator peak of a training step, on models the estimator was not
written against (issue: attention, autocast, backward transients, optimizer temporaries, recurrent, residual,
embedding-heavy models, DDP and FSDP ranks).

For each case: the peak torch's CPU allocator reached over a training step once the optimizer state exists
(`measure_peak`: torch.profiler memory events plus what was alive when the step began), the estimate
(`estimate_memory`'s default, method "auto": traced, checked against real steps at batch 1 and 2, or those
extrapolated where the trace misses kernel workspaces), and the analytic one. Each estimate must be within
the uncertainty it states, which must be ≤ 10% (≤ 15% for an extrapolation), and the analytic one's error
within its own stated band. ``pytest -s`` prints the table.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional

from tests.gloo_ranks import run_on_gloo_ranks
from workbench import models
from workbench.estimate import estimate_memory
from workbench.estimate.measure import BucketLog, counting_allreduce_hook, measure_peak
from workbench.estimate.memory import ANALYTIC_UNCERTAINTY, EXTRAPOLATED_UNCERTAINTY, TRACED_UNCERTAINTY
from workbench.parallel.launching.launcher import free_port
from workbench.tables import text_table
from workbench.train import OptimizerConfig
from workbench.train.optim import build_optimizer

DTYPES = {"fp32": None, "bf16": torch.bfloat16}


class HandAttentionGPT(nn.Module):
    """A GPT whose attention is written out (q·kᵀ, mask, softmax, ·v): T × T scores inside its forward."""

    def __init__(self, vocab: int, context: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.zeros(context, d_model))
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(d_model),
                    "qkv": nn.Linear(d_model, 3 * d_model),
                    "out": nn.Linear(d_model, d_model),
                    "norm2": nn.LayerNorm(d_model),
                    "up": nn.Linear(d_model, 4 * d_model),
                    "down": nn.Linear(4 * d_model, d_model),
                }
            )
            for _ in range(layers)
        )
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        x = self.embed(ids) + self.position[:t]
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
        for block in self.blocks:
            q, k, v = block["qkv"](block["norm1"](x)).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            attention = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            x = x + block["out"]((attention @ v).transpose(1, 2).reshape(b, t, -1))
            x = x + block["down"](functional.gelu(block["up"](block["norm2"](x))))
        return self.head(x)


class RecurrentClassifier(nn.Module):
    def __init__(self, cell: type[nn.RNNBase], vocab: int, hidden: int, classes: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 64)
        self.rnn = cell(64, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        output, _ = self.rnn(self.embed(ids))
        return self.head(output)  # a prediction per token


class ResidualConvNet(nn.Module):
    def __init__(self, width: int = 32, blocks: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(width, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
            )
            for _ in range(blocks)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        for block in self.blocks:
            x = functional.relu(x + block(x))
        return self.head(x.mean(dim=(2, 3)))


class EmbeddingBagModel(nn.Module):
    """Embedding-heavy: a 50k × 64 table (most of the parameters and optimizer state), a small MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(50_000, 64)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.table(ids).mean(dim=1))


def _mlp_ln_gelu() -> nn.Module:
    layers: list[nn.Module] = []
    width = 256
    for _ in range(4):
        layers += [nn.Linear(width, 512), nn.LayerNorm(512), nn.GELU()]
        width = 512
    return nn.Sequential(*layers, nn.Linear(512, 10))


def _cnn_bn_inplace() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _conv1d_dropout() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(1, 32, 9, padding=4),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.Conv1d(32, 64, 9, padding=4, stride=2),
        nn.ReLU(),
        nn.Dropout(0.2),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
        nn.Linear(64, 5),
    )


def _images(shape):
    return lambda b: (torch.randn(b, *shape), torch.randint(0, 10, (b,)))


def _tokens(vocab, t, per_token=True):
    return lambda b: (
        torch.randint(0, vocab, (b, t)),
        torch.randint(0, vocab if per_token else 2, (b, t) if per_token else (b,)),
    )


# name → (model factory, batch factory(batch size), loss, optimizer, momentum, batch, precision)
CASES = {
    "MLP 4×512 LN+GELU, adamw fp32 b8": (
        _mlp_ln_gelu, _images((256,)), functional.cross_entropy, "adamw", 0.0, 8, "fp32",
    ),
    "MLP 4×512 LN+GELU, sgd bf16 b256": (
        _mlp_ln_gelu, _images((256,)), functional.cross_entropy, "sgd", 0.9, 256, "bf16",
    ),
    "CNN BatchNorm + in-place ReLU, sgd fp32 b32": (
        _cnn_bn_inplace, _images((3, 32, 32)), functional.cross_entropy, "sgd", 0.9, 32, "fp32",
    ),
    "transformer_lm d128 h8 T128 L3, adamw bf16 b16": (
        lambda: models.transformer_lm(40, 128, d_model=128, n_heads=8, n_layers=3),
        _tokens(40, 128), models.next_token_loss, "adamw", 0.0, 16, "bf16",
    ),
    "transformer_lm d64 h4 T256 L2, adam fp32 b8 (T²)": (
        lambda: models.transformer_lm(40, 256, d_model=64, n_heads=4, n_layers=2),
        _tokens(40, 256), models.next_token_loss, "adam", 0.0, 8, "fp32",
    ),
    "hand-written attention GPT d96 h6 T64 L2, sgd bf16 b64": (
        lambda: HandAttentionGPT(40, 64, 96, 6, 2), _tokens(40, 64), models.next_token_loss, "sgd", 0.9, 64,
        "bf16",
    ),
    "GRU 2×128 classifier, adam fp32 b32 T50": (
        lambda: RecurrentClassifier(nn.GRU, 100, 128, 100, 2), _tokens(100, 50), models.next_token_loss,
        "adam", 0.0, 32, "fp32",
    ),
    "LSTM 256 language model, sgd fp32 b16 T64": (
        lambda: RecurrentClassifier(nn.LSTM, 60, 256, 60, 1), _tokens(60, 64), models.next_token_loss, "sgd",
        0.9, 16, "fp32",
    ),
    "residual conv net with BatchNorm, adamw fp32 b16": (
        ResidualConvNet, _images((3, 48, 48)), functional.cross_entropy, "adamw", 0.0, 16, "fp32",
    ),
    "embedding-heavy (50k × 64 table), adam fp32 b128": (
        EmbeddingBagModel, _tokens(50_000, 20, per_token=False), functional.cross_entropy, "adam", 0.0, 128,
        "fp32",
    ),
    "small_cnn (workbench), adamw bf16 b64": (
        lambda: models.small_cnn(3, 10), _images((3, 32, 32)), functional.cross_entropy, "adamw", 0.0, 64,
        "bf16",
    ),
    "Conv1d + dropout, sgd fp32 b64 L1024": (
        _conv1d_dropout, lambda b: (torch.randn(b, 1, 1024), torch.randint(0, 5, (b,))),
        functional.cross_entropy, "sgd", 0.0, 64, "fp32",
    ),
}  # fmt: skip


def _estimates(model, batch, loss, optimizer, momentum, precision, **strategy):
    x, y = batch
    common = {"sample": x[:1], "batch_size": len(x), "precision": precision, "optimizer": optimizer}
    common.update(momentum=momentum, **strategy)
    traced = estimate_memory(model, target=y[:1], loss_fn=loss, **common)
    analytic = estimate_memory(model, method="analytic", **common)
    return traced, analytic


def _single(name: str) -> dict:
    build, batch_of, loss, optimizer, momentum, batch_size, precision = CASES[name]
    torch.manual_seed(0)
    model = build()
    x, y = batch_of(batch_size)
    traced, analytic = _estimates(model, (x, y), loss, optimizer, momentum, precision)
    optim = build_optimizer(model.parameters(), OptimizerConfig(optimizer, lr=1e-3, momentum=momentum))
    real = measure_peak(model, optim, loss, x, y, autocast_dtype=DTYPES[precision])
    return {
        "name": name,
        "real": real.peak,
        "proxy": real.proxy.total,
        "traced": traced,
        "analytic": analytic,
    }


def _ddp_rank(rank: int, world_size: int) -> dict:
    """The hand-written GPT, adam, batch 32 per rank, bf16, on DDP (default buckets beside .grad)."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = HandAttentionGPT(40, 64, 96, 6, 2)
    x, y = _tokens(40, 64)(32)
    traced, analytic = _estimates(model, (x, y), models.next_token_loss, "adam", 0.0, "bf16", strategy="ddp",
                                  devices=world_size)  # fmt: skip
    ddp = DistributedDataParallel(model)
    log = BucketLog()
    ddp.register_comm_hook(log, counting_allreduce_hook)
    optim = build_optimizer(ddp.parameters(), OptimizerConfig("adam", lr=1e-3))
    peak = measure_peak(ddp, optim, models.next_token_loss, x, y, autocast_dtype=torch.bfloat16, proxy=False,
                        buckets=log)  # fmt: skip
    real = peak.peak  # with the buckets the step used, allocated before it

    return {"name": f"hand-written GPT, adam bf16 b32, DDP rank {rank} of 2", "real": real,
            "proxy": None, "traced": traced, "analytic": analytic}  # fmt: skip


def _fsdp_rank(rank: int, world_size: int) -> dict:
    """A transformer_lm d128 T128 L3, adam fp32, batch 6 per rank, on workbench's FSDP (FSDP2, a unit per
    block), measured on this rank: its shards, the gathered units, the reduce-scatters."""
    from workbench.parallel import FullyShardedDataParallel

    torch.manual_seed(0)
    model = models.transformer_lm(40, 128, d_model=128, n_heads=4, n_layers=3)
    x, y = _tokens(40, 128)(6)
    traced, analytic = _estimates(model, (x, y), models.next_token_loss, "adam", 0.0, "fp32", strategy="fsdp",
                                  devices=world_size)  # fmt: skip
    strategy = FullyShardedDataParallel()
    strategy.bind()
    sharded = strategy.wrap(model)
    optim = build_optimizer(sharded.parameters(), OptimizerConfig("adam", lr=1e-3))
    peak = measure_peak(sharded, optim, models.next_token_loss, x, y, proxy=False)  # this rank's shards
    return {"name": f"transformer_lm d128 T128 L3, adam fp32 b6, FSDP rank {rank} of 2", "real": peak.peak,
            "proxy": None, "traced": traced, "analytic": analytic}  # fmt: skip


@pytest.fixture(scope="module")
def matrix() -> list[dict]:
    rows = [_single(name) for name in CASES]
    rows += run_on_gloo_ranks(_ddp_rank, 2, free_port())
    rows += run_on_gloo_ranks(_fsdp_rank, 2, free_port())
    table = [
        [
            row["name"],
            f"{row['real'] / 2**20:.2f}",
            f"{row['traced'].total / 2**20:.2f}",
            f"{row['traced'].total / row['real'] - 1:+.1%}",
            f"{row['analytic'].total / 2**20:.2f}",
            f"{row['analytic'].total / row['real'] - 1:+.1%}",
        ]
        for row in rows
    ]
    header = ["model, optimizer, precision, batch", "peak MiB", "estimate", "error", "analytic", "error"]
    print("\n" + text_table(header, table))
    return rows


def test_at_least_12_models_and_settings_are_measured(matrix):
    assert len(matrix) >= 12 and len({row["name"] for row in matrix}) == len(matrix)


def test_estimates_are_within_their_stated_uncertainty_of_the_allocator_peak(matrix):
    assert TRACED_UNCERTAINTY <= 0.10 and EXTRAPOLATED_UNCERTAINTY <= 0.15  # what the issue asks
    for row in matrix:
        estimate = row["traced"]
        error = estimate.total / row["real"] - 1
        assert abs(error) <= estimate.uncertainty, (
            f"{row['name']}: {estimate.describe()}, off by {error:+.1%}"
        )
        assert estimate.basis.startswith(("traced (checked", "measured at batch 4 and 8")), estimate.basis
        assert estimate.checked_on == "cpu"  # where its real steps ran: the model's device
    extrapolated = [row["name"] for row in matrix if row["traced"].basis.startswith("measured")]
    assert "LSTM 256 language model, sgd fp32 b16 T64" in extrapolated  # oneDNN's workspaces on CPU


def test_analytic_estimates_stay_within_their_stated_band(matrix):
    for row in matrix:
        error = row["analytic"].total / row["real"] - 1
        assert abs(error) <= ANALYTIC_UNCERTAINTY, f"{row['name']}: analytic {error:+.1%}"
        assert row["analytic"].basis == "analytic" and row["analytic"].checked_on is None
