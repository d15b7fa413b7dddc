"""Small models for the tutorials: an MLP, linear regression, a CNN and a GPT-style character LM.

The CNN and the LM are one `nn.Sequential` whose top-level children each take one tensor and return one,
so pipeline parallelism can cut them between children; tensor parallelism splits the Linear layers inside
(`CausalSelfAttention` never assumes how many heads its q/k/v produce).

Example:
    >>> import torch
    >>> mlp(64, 10, hidden=(32,))(torch.zeros(5, 1, 8, 8)).shape
    torch.Size([5, 10])
    >>> small_cnn(3, 10)(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
    >>> transformer_lm(37, context=32)(torch.zeros(2, 32, dtype=torch.int64)).shape
    torch.Size([2, 32, 37])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional

from workbench._validate import check_int


def mlp(
    in_features: int, num_classes: int, hidden: Sequence[int] = (128, 128), dropout: float = 0.0
) -> nn.Sequential:
    """Flatten, then Linear-ReLU(-Dropout) per hidden width, then a Linear to `num_classes` logits."""
    check_int("in_features", in_features, minimum=1)
    check_int("num_classes", num_classes, minimum=1)
    _check_dropout(dropout)
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for i, size in enumerate(hidden):
        layers += [nn.Linear(width, check_int(f"hidden[{i}]", size, minimum=1)), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def linear(in_features: int, out_features: int = 1) -> nn.Linear:
    """Linear regression: y = x·W + b."""
    check_int("in_features", in_features, minimum=1)
    return nn.Linear(in_features, check_int("out_features", out_features, minimum=1))


def small_cnn(channels: int, num_classes: int, width: int = 16, hidden: int | None = None) -> nn.Sequential:
    """Two conv-ReLU-pool blocks, global average pooling, a Linear classifier (any image size ≥ 4).

    With `hidden`, the classifier is Linear(2·width, hidden)-ReLU-Linear(hidden, num_classes), three more
    top-level children (a head that tensor parallelism splits column-wise, then row-wise).

    Example:
        >>> [type(m).__name__ for m in small_cnn(3, 10, hidden=64)][-3:]
        ['Linear', 'ReLU', 'Linear']
    """
    check_int("channels", channels, minimum=1)
    check_int("num_classes", num_classes, minimum=1)
    check_int("width", width, minimum=1)
    if hidden is None:
        head: list[nn.Module] = [nn.Linear(2 * width, num_classes)]
    else:
        check_int("hidden", hidden, minimum=1)
        head = [nn.Linear(2 * width, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)]
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1),  # (B, w, H, W)
        nn.ReLU(),
        nn.MaxPool2d(2),  # (B, w, H/2, W/2)
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (B, 2w, H/4, W/4)
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),  # (B, 2w)
        *head,  # (B, num_classes)
    )


class TokenEmbedding(nn.Module):
    """Token plus learned position embeddings: int64 ids ``(B, T)`` → ``(B, T, d_model)``, T ≤ context."""

    def __init__(self, vocab_size: int, context: int, d_model: int) -> None:
        super().__init__()
        self.context = check_int("context", context, minimum=1)
        self.token = nn.Embedding(check_int("vocab_size", vocab_size, minimum=1), d_model)
        self.position = nn.Embedding(context, check_int("d_model", d_model, minimum=1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[-1]
        if length > self.context:
            raise ValueError(f"sequence length T={length} is longer than the model's context={self.context}")
        positions = torch.arange(length, device=ids.device)  # (T,)
        return self.token(ids) + self.position(positions)  # (B, T, C)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions ≤ t; children ``q``, ``k``, ``v``, ``proj``.

    The number of heads is read from the width q/k/v produce (``-1`` in the reshape), so a tensor-parallel
    shard whose q/k/v output ``d_model / N`` features runs its ``n_heads / N`` heads unchanged.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_int("n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        self.head_dim = d_model // n_heads
        self.dropout = _check_dropout(dropout)
        self.q = nn.Linear(d_model, d_model)
        # no key bias: q·b_k is the same for every key of a query, so softmax cancels it; its gradient is
        # exactly zero and Adam would only amplify rounding noise in it
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # (B, T, C)
        q = self.q(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = self.v(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        dropout = self.dropout if self.training else 0.0
        # (B, nh, T, hs): position t attends to positions ≤ t
        y = functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, nh·hs)
        return functional.dropout(self.proj(y), dropout, self.training)  # (B, T, C)


class FeedForward(nn.Module):
    """Position-wise MLP ``fc1`` (d_model → d_ff), ``act`` (GELU), ``fc2`` (d_ff → d_model), then dropout."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = _check_dropout(dropout)
        self.fc1 = nn.Linear(check_int("d_model", d_model, minimum=1), check_int("d_ff", d_ff, minimum=1))
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.act(self.fc1(x))  # (B, T, d_ff)
        return functional.dropout(self.fc2(hidden), self.dropout, self.training)  # (B, T, C)


class TransformerBlock(nn.Module):
    """Pre-norm residual block: x + attn(ln1(x)), then x + mlp(ln2(x)); ``(B, T, C)`` → ``(B, T, C)``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, d_ff, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def transformer_lm(
    vocab_size: int,
    context: int,
    d_model: int = 64,
    n_heads: int = 4,
    n_layers: int = 2,
    d_ff: int | None = None,
    dropout: float = 0.0,
) -> nn.Sequential:
    """A GPT-style language model: ids ``(B, T)`` → next-token logits ``(B, T, vocab_size)``, T ≤ context.

    Top-level children, in order: ``embed`` (`TokenEmbedding`), ``block0`` … ``block{n_layers-1}``
    (`TransformerBlock`), ``norm`` (LayerNorm), ``head`` (Linear d_model → vocab_size); each takes one
    tensor and returns one, so the model splits into pipeline stages between any two.

    Args:
        vocab_size: number of token ids (the logits' last dimension), ≥ 1.
        context: longest sequence (positions embedded), ≥ 1.
        d_model: width of the residual stream; `n_heads` must divide it.
        n_heads: attention heads per block, ≥ 1.
        n_layers: transformer blocks, ≥ 1.
        d_ff: hidden width of each block's MLP; None means 4·d_model.
        dropout: dropout on attention weights and on each residual branch, in [0, 1).

    Raises:
        ValueError: a size out of range, or n_heads not dividing d_model.

    Example:
        >>> model = transformer_lm(37, context=16, d_model=32, n_heads=2, n_layers=3)
        >>> [name for name, _ in model.named_children()]
        ['embed', 'block0', 'block1', 'block2', 'norm', 'head']
        >>> model(torch.zeros(4, 10, dtype=torch.int64)).shape
        torch.Size([4, 10, 37])
    """
    check_int("n_layers", n_layers, minimum=1)
    d_ff = 4 * check_int("d_model", d_model, minimum=1) if d_ff is None else d_ff
    layers: OrderedDict[str, nn.Module] = OrderedDict(embed=TokenEmbedding(vocab_size, context, d_model))
    for i in range(n_layers):
        layers[f"block{i}"] = TransformerBlock(d_model, n_heads, d_ff, dropout)
    layers["norm"] = nn.LayerNorm(d_model)
    layers["head"] = nn.Linear(d_model, vocab_size)
    return nn.Sequential(layers)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every token: logits ``(..., V)``, targets ``(...)`` (``(B, T, V)`` and
    ``(B, T)``, or ``(B, V)`` and ``(B,)`` as `F.cross_entropy`).

    Example:
        >>> next_token_loss(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.int64))  # ln 4
        tensor(1.3863)
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not match: "
            "logits must be targets' shape plus one last dimension of classes"
        )
    return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _check_dropout(dropout: object) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    return float(dropout)
