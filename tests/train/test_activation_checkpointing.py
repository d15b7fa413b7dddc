"""``TrainConfig(activation_checkpointing=...)``: the chosen blocks run their forward again in backward, the
step's peak memory falls, the results stay the same (dropout included), on one process and on 2 ranks under
DDP and FSDP; the model gets its own forward back; what cannot be recomputed is said."""

from __future__ import annotations

import pytest
import torch

from workbench import models
from workbench.data import load_dataset, split_dataset
from workbench.estimate.measure import measure_peak
from workbench.parallel import DataParallel, FullyShardedDataParallel, launch
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.activation_checkpointing import ActivationCheckpointing
from workbench.train.optim import build_optimizer

CONTEXT = 32


def _splits():
    data = load_dataset("text", n_samples=256, context=CONTEXT)
    return split_dataset(data, (0.8, 0.1, 0.1), seed=0), data.num_classes


def _lm(vocab: int, layers: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.transformer_lm(vocab, CONTEXT, d_model=32, n_heads=2, n_layers=layers, dropout=0.1)


def _config(which, **changes) -> TrainConfig:
    adamw = OptimizerConfig("adamw", lr=3e-3)
    settings = {"epochs": 2, "batch_size": 16, "optimizer": adamw, **changes}
    return TrainConfig(activation_checkpointing=which, **settings)


def _attention_calls(model: torch.nn.Module) -> list[int]:
    """Calls of each block's attention (a child module: its hooks run in forward and in the recompute)."""
    calls = []
    for block in model.modules():
        if type(block).__name__ == "CausalSelfAttention":
            calls.append(0)
            index = len(calls) - 1
            block.register_forward_hook(lambda *_, index=index: calls.__setitem__(index, calls[index] + 1))
    return calls


def test_recomputed_blocks_train_to_the_same_weights_and_run_their_forward_twice_a_step():
    splits, vocab = _splits()
    trained, calls, steps = {}, {}, {}
    for which in (None, "blocks", ("TransformerBlock",)):
        model = _lm(vocab)
        calls[which] = _attention_calls(model)
        result = Trainer(model, models.next_token_loss, splits, _config(which), progress=False).fit()
        trained[which], steps[which] = [p.detach().clone() for p in model.parameters()], result.step
        assert all("forward" not in vars(m) for m in model.modules()), "the model keeps a recomputing forward"
    for which in ("blocks", ("TransformerBlock",)):
        assert all(torch.equal(a, b) for a, b in zip(trained[None], trained[which], strict=True)), which
        # each step's backward ran every block's forward again; evaluation (no gradients) did not
        assert calls[which] == [n + steps[which] for n in calls[None]], (calls, steps)


def test_a_forward_set_on_the_instance_by_another_library_is_recomputed_and_given_back():
    splits, vocab = _splits()
    model = _lm(vocab)
    block = next(m for m in model.modules() if type(m).__name__ == "TransformerBlock")
    calls = []

    def counted(*args, **kwargs):  # as a library's hook wraps a module's forward on the instance
        calls.append(torch.is_grad_enabled())
        return type(block).forward(block, *args, **kwargs)

    block.forward = counted
    result = Trainer(model, models.next_token_loss, splits, _config("blocks"), progress=False).fit()
    assert block.forward is counted
    assert calls.count(True) == 2 * result.step  # in forward and again in backward, through the library's


def test_the_step_s_peak_memory_falls_where_blocks_are_recomputed():
    """The allocator's peak over a step (torch.profiler's memory events on CPU) of 4 blocks at batch 32."""
    splits, vocab = _splits()
    x, y = splits.train.features[:32], splits.train.targets[:32]
    peaks = {}
    for which in (None, "blocks"):
        model = _lm(vocab, layers=4).train()
        optimizer = build_optimizer(model.parameters(), OptimizerConfig("adamw"))
        with ActivationCheckpointing(model, which).applied(model):
            peaks[which] = measure_peak(model, optimizer, models.next_token_loss, x, y).during
    assert peaks["blocks"] < 0.6 * peaks[None], peaks


def _both_ways(strategy) -> tuple[float, list[int]]:
    """The largest difference of the weights trained without and with recomputed blocks, and how many more
    times each block's attention ran with them (rank 0's; FSDP's weights gathered whole)."""
    splits, vocab = _splits()
    weights, calls = [], []
    for which in (None, "blocks"):
        model = _lm(vocab)
        calls.append(_attention_calls(model))
        Trainer(model, models.next_token_loss, splits, _config(which, epochs=1), strategy=strategy,
                progress=False).fit()  # fmt: skip
        whole = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
        weights.append(torch.cat([w.detach().flatten() for w in whole]))
    return (weights[0] - weights[1]).abs().max().item(), [b - a for a, b in zip(*calls, strict=True)]


@pytest.mark.parametrize("strategy", [DataParallel(), FullyShardedDataParallel()], ids=["ddp", "fsdp"])
def test_on_two_ranks_recomputed_blocks_train_alike(strategy):
    difference, recomputed = launch(_both_ways, 2, strategy=strategy, verbose=False)
    assert difference == 0.0
    assert recomputed == [7] * 3  # 204 samples over 2 ranks at batch 16: 7 steps, each block recomputed


@pytest.mark.parametrize(
    ("which", "says"),
    [
        (
            "blocks",
            r"found no repeated block in this Sequential .*its classes: Flatten ×1, Linear ×3, ReLU ×2",
        ),
        (
            "Conv2d",
            r"names 'Conv2d', which this Sequential has no module of; its classes: Flatten ×1, Linear",
        ),
    ],
)
def test_a_model_without_the_modules_named_is_refused_before_training(which, says):
    splits, _ = _splits()
    with pytest.raises(ValueError, match=says):
        Trainer(models.mlp(CONTEXT, 10), torch.nn.functional.cross_entropy, splits, _config(which))


def test_the_config_keeps_names_and_refuses_what_names_no_module():
    assert TrainConfig(
        activation_checkpointing=torch.nn.TransformerEncoderLayer
    ).activation_checkpointing == ("TransformerEncoderLayer",)
    config = TrainConfig(activation_checkpointing=["Block", torch.nn.Linear])
    assert config.activation_checkpointing == ("Block", "Linear")
    assert TrainConfig.from_dict(config.to_dict()) == config
    for bad in (True, 3, (), "two words"):
        with pytest.raises(ValueError, match=r"activation_checkpointing must be 'blocks', a module class or"):
            TrainConfig(activation_checkpointing=bad)
