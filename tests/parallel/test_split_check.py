"""Tensor parallel checks, on the first batch, that the split model computes what the whole one does.

A plan is a claim about the forward that only running it can test: between fc1 (column-wise) and fc2
(row-wise) each rank holds half the hidden features. A LayerNorm there failed with torch's shape error, and a
softmax there trained silently on other numbers; both now stop before the first update, naming the plan.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.parallel import WorkerFailed, launch
from workbench.parallel.strategies.tensor_parallel import TensorParallel, default_plan
from workbench.train import OptimizerConfig, TrainConfig, Trainer


class _Hidden(nn.Module):
    """fc1 → `between` → fc2: default_plan splits fc1 column-wise and fc2 row-wise."""

    def __init__(self, between: str):
        super().__init__()
        torch.manual_seed(0)
        self.between = between
        self.fc1, self.norm, self.fc2 = nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 2)

    def forward(self, x):
        hidden = torch.relu(self.fc1(x))
        if self.between == "norm":
            hidden = self.norm(hidden)
        elif self.between == "softmax":
            hidden = torch.softmax(hidden, dim=-1)
        elif self.between == "bug":
            raise RuntimeError("a bug of the model's own")
        return self.fc2(hidden)


def _train(strategy, between):
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))
    y = (x[:, 0] > 0).long()
    config = TrainConfig(epochs=1, batch_size=16, optimizer=OptimizerConfig("adam", lr=1e-2))
    return Trainer(_Hidden(between), F.cross_entropy, TensorDataset(x, y), config, strategy=strategy).fit()


@pytest.mark.parametrize(
    ("between", "words"),
    [
        ("norm", r"tensor-parallel model failed on the first batch: RuntimeError: Given normalized_shape"),
        ("softmax", r"tensor parallel does not compute what the model does: on the first batch"),
    ],
)
def test_a_plan_the_forward_breaks_stops_before_the_first_update_naming_the_plan(between, words):
    assert default_plan(_Hidden(between)) == {"fc1": "colwise", "fc2": "rowwise"}
    with pytest.raises(WorkerFailed, match=words) as failed:
        launch(_train, 2, args=(between,), strategy=TensorParallel())
    message = str(failed.value)
    assert "'fc1' column-wise (8 output features, 4 on each of 2 ranks)" in message
    assert "train this model with DataParallel()" in message


def test_a_plan_the_forward_keeps_trains_and_check_false_skips_the_check():
    """The same model with nothing between fc1 and fc2 but ReLU passes; check=False trains the softmax one
    (on other numbers, as before the check existed)."""
    assert launch(_train, 2, args=("relu",), strategy=TensorParallel()).status == "finished"
    assert launch(_train, 2, args=("softmax",), strategy=TensorParallel(check=False)).status == "finished"


def _train_with_column_targets(strategy):
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))
    y = torch.randn(64, 1)  # a column for mse_loss against 2 outputs: broadcast, the user's own mistake
    config = TrainConfig(epochs=1, batch_size=16, optimizer=OptimizerConfig("adam", lr=1e-2))
    return Trainer(_Hidden("relu"), F.mse_loss, TensorDataset(x, y), config, strategy=strategy).fit()


@pytest.mark.parametrize(
    ("train", "args", "words"),
    [
        (_train, ("bug",), r"a bug of the model's own"),
        (
            _train_with_column_targets,
            (),
            r"loss_fn got outputs of shape \(16, 2\) and targets of shape \(16, 1\)",
        ),
    ],
)
def test_an_error_of_the_model_or_data_of_its_own_is_said_as_without_the_split(train, args, words):
    """An error the whole model raises too is not blamed on the plan; the check runs on copies of the
    objective, so the first training step still makes its shape check (the broadcast targets)."""
    with pytest.raises(WorkerFailed, match=words) as failed:
        launch(train, 2, args=args, strategy=TensorParallel())
    assert "The plan splits" not in str(failed.value)


class _LlamaStyle(nn.Module):
    """A model written as Hugging Face's Llama names its layers: q_proj…o_proj, gate/up/down_proj."""

    def __init__(self, fixed_heads: bool):
        super().__init__()
        torch.manual_seed(0)
        self.fixed_heads, self.n_heads, self.head_dim = fixed_heads, 4, 4
        self.embed = nn.Embedding(11, 16)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(16, 16) for _ in range(4))
        self.mlp = nn.ModuleDict(
            {"gate_proj": nn.Linear(16, 32), "up_proj": nn.Linear(16, 32), "down_proj": nn.Linear(32, 16)}
        )
        self.head = nn.Linear(16, 2)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, length, _ = x.shape
        heads = self.n_heads if self.fixed_heads else -1  # -1: the heads this rank holds

        def split(t):
            return t.view(batch, length, heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        x = x + self.o_proj(attended.reshape(batch, length, -1))
        mlp = self.mlp
        x = x + mlp["down_proj"](F.silu(mlp["gate_proj"](x)) * mlp["up_proj"](x))
        return self.head(x.mean(dim=1))


def _train_llama_style(strategy, fixed_heads):
    tokens = torch.randint(0, 11, (64, 8), generator=torch.Generator().manual_seed(2))
    labels = (tokens[:, 0] > 5).long()
    config = TrainConfig(epochs=1, batch_size=16, optimizer=OptimizerConfig("adam", lr=1e-2))
    data = TensorDataset(tokens, labels)
    return Trainer(_LlamaStyle(fixed_heads), F.cross_entropy, data, config, strategy=strategy).fit()


def test_a_llama_style_model_of_your_own_is_split_by_its_layer_names_and_checked():
    """default_plan reads q_proj…o_proj and gate/up/down_proj; the split model passes the first-batch check
    when its forward counts the heads it holds (view(..., -1, head_dim)), and stops naming the plan when it
    views the split q as all n_heads."""
    assert default_plan(_LlamaStyle(False)) == {
        "q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise",
        "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise",
    }  # fmt: skip
    assert launch(_train_llama_style, 2, args=(False,), strategy=TensorParallel()).status == "finished"
    with pytest.raises(WorkerFailed, match=r"failed on the first batch: RuntimeError: shape .* is invalid"):
        launch(_train_llama_style, 2, args=(True,), strategy=TensorParallel())
