import pytest
import torch
from torch import nn
from torch.nn import functional

from workbench import models
from workbench.models import (
    CausalSelfAttention,
    FeedForward,
    TokenEmbedding,
    TransformerBlock,
    next_token_loss,
    small_cnn,
    transformer_lm,
)


def _ids(*shape, vocab=37, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def test_transformer_lm_maps_ids_to_logits():
    torch.manual_seed(0)
    model = transformer_lm(37, context=16, d_model=32, n_heads=4, n_layers=2)
    logits = model(_ids(3, 16))
    assert logits.shape == (3, 16, 37) and logits.dtype == torch.float32
    assert model(_ids(3, 5)).shape == (3, 5, 37)  # shorter than the context


def test_transformer_lm_top_level_children_split_into_stages():
    model = transformer_lm(37, context=8, d_model=16, n_heads=2, n_layers=3, d_ff=24)
    names = [name for name, _ in model.named_children()]
    assert names == ["embed", "block0", "block1", "block2", "norm", "head"]
    assert isinstance(model.embed, TokenEmbedding) and isinstance(model.block1, TransformerBlock)
    assert (
        isinstance(model.norm, nn.LayerNorm)
        and model.head.in_features == 16
        and model.head.out_features == 37
    )
    block = model.block0
    assert [name for name, _ in block.named_children()] == ["ln1", "attn", "ln2", "mlp"]
    assert [name for name, _ in block.attn.named_children()] == ["q", "k", "v", "proj"]
    assert all(isinstance(m, nn.Linear) and m.weight.shape == (16, 16) for m in block.attn.children())
    assert [name for name, _ in block.mlp.named_children()] == ["fc1", "act", "fc2"]
    assert block.mlp.fc1.weight.shape == (24, 16) and isinstance(block.mlp.act, nn.GELU)
    assert isinstance(model.embed.token, nn.Embedding) and model.embed.position.weight.shape == (8, 16)
    # each child takes one tensor and returns one: running them in turn is the model
    x = _ids(2, 8)
    h = x
    for child in model.children():
        h = child(h)
    assert torch.equal(h, model(x))


def test_d_ff_defaults_to_four_times_d_model():
    assert transformer_lm(10, context=4, d_model=8, n_heads=2).block0.mlp.fc1.out_features == 32


def test_attention_is_causal():
    torch.manual_seed(0)
    model = transformer_lm(37, context=12, d_model=32, n_heads=4).eval()
    x = _ids(2, 12)
    changed = x.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 37
    a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])  # positions before 7 do not see token 7
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_block_is_a_pre_norm_residual():
    torch.manual_seed(0)
    block = TransformerBlock(16, 2, 32).eval()
    x = torch.randn(2, 5, 16)
    h = x + block.attn(block.ln1(x))
    torch.testing.assert_close(block(x), h + block.mlp(block.ln2(h)))


def test_attention_matches_a_per_head_reference():
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.ones(6, 6).tril().bool()
    heads = []
    for h in range(4):
        cols = slice(4 * h, 4 * h + 4)
        q, k, v = (layer(x)[..., cols] for layer in (attn.q, attn.k, attn.v))  # (B, T, hs)
        scores = (q @ k.transpose(1, 2) / 2.0).masked_fill(~mask, float("-inf"))  # (B, T, T), √hs = 2
        heads.append(scores.softmax(-1) @ v)
    torch.testing.assert_close(attn(x), attn.proj(torch.cat(heads, -1)))


def test_attention_runs_on_a_tensor_parallel_shard():
    # rank 0 of 2: q/k/v keep 32 of the 64 output features (2 of the 4 heads), proj takes those 32 inputs
    attn = CausalSelfAttention(64, 4)
    attn.q, attn.k, attn.v = nn.Linear(64, 32), nn.Linear(64, 32), nn.Linear(64, 32)
    attn.proj = nn.Linear(32, 64)
    assert attn(torch.randn(3, 10, 64)).shape == (3, 10, 64)


def test_dropout_applies_in_training_only():
    torch.manual_seed(0)
    model = transformer_lm(37, context=8, d_model=16, n_heads=2, dropout=0.5)
    x = _ids(2, 8)
    model.eval()
    torch.testing.assert_close(model(x), model(x))
    model.train()
    assert not torch.allclose(model(x), model(x))


def test_embedding_rejects_sequences_longer_than_the_context():
    model = transformer_lm(37, context=8, d_model=16, n_heads=2)
    with pytest.raises(ValueError, match="sequence length T=9 is longer than the model's context=8"):
        model(_ids(1, 9))


def test_n_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=64"):
        transformer_lm(37, context=8, d_model=64, n_heads=3)
    with pytest.raises(ValueError, match="n_heads=5 must divide d_model=16"):
        CausalSelfAttention(16, 5)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"context": 0}, "context"),
        ({"d_model": 0}, "d_model"),
        ({"n_heads": 0}, "n_heads"),
        ({"n_layers": 0}, "n_layers"),
        ({"d_ff": 0}, "d_ff"),
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": "high"}, "dropout"),
    ],
)
def test_transformer_lm_names_the_bad_size(options, field):
    kwargs = {"vocab_size": 10, "context": 8, **options}
    with pytest.raises(ValueError, match=field):
        transformer_lm(**kwargs)


def test_module_sizes_are_checked_when_built_alone():
    with pytest.raises(ValueError, match="d_ff must be an integer ≥ 1"):
        FeedForward(8, 0)
    with pytest.raises(ValueError, match="dropout must be in"):
        FeedForward(8, 16, dropout=-0.1)
    with pytest.raises(ValueError, match="vocab_size must be an integer ≥ 1"):
        TokenEmbedding(0, 8, 8)


def test_next_token_loss_is_cross_entropy_over_all_tokens():
    logits, targets = torch.randn(3, 5, 7), _ids(3, 5, vocab=7)
    expected = functional.cross_entropy(logits.reshape(15, 7), targets.reshape(15))
    torch.testing.assert_close(next_token_loss(logits, targets), expected)
    flat_logits, flat_targets = torch.randn(4, 7), _ids(4, vocab=7)  # a drop-in for F.cross_entropy
    torch.testing.assert_close(
        next_token_loss(flat_logits, flat_targets), functional.cross_entropy(flat_logits, flat_targets)
    )


def test_next_token_loss_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits \(3, 5, 7\) and targets \(3, 4\) do not match"):
        next_token_loss(torch.randn(3, 5, 7), _ids(3, 4, vocab=7))


def test_small_cnn_with_a_hidden_head():
    model = small_cnn(3, 10, width=8, hidden=64)
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 10)
    head = list(model)[-3:]
    assert [type(m) for m in head] == [nn.Linear, nn.ReLU, nn.Linear]
    assert head[0].weight.shape == (64, 16) and head[2].weight.shape == (10, 64)


def test_small_cnn_without_hidden_is_unchanged():
    model = small_cnn(3, 10)
    assert len(model) == 9 and isinstance(model[-1], nn.Linear) and model[-1].weight.shape == (10, 32)
    # 3·16·9 + 16 + 16·32·9 + 32 + 32·10 + 10: the two convs and the classifier
    assert sum(p.numel() for p in model.parameters()) == 5_418


def test_small_cnn_and_mlp_name_bad_sizes():
    with pytest.raises(ValueError, match="hidden must be an integer ≥ 1, got 0"):
        small_cnn(3, 10, hidden=0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1"):
        models.mlp(4, 2, dropout=1)
