"""Bytes each device sends per training step, per parallel strategy (ring collectives).

A ring all-reduce of S bytes over N devices is a reduce-scatter then an all-gather: each device sends
(N−1)/N × S in each, 2(N−1)/N × S in all. An all-gather or a reduce-scatter alone sends (N−1)/N × S.

Example:
    >>> estimate = communication_bytes("ddp", 1_000_000, 4)
    >>> estimate.payload_bytes, estimate.sent_bytes
    (4000000, 6000000)
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench._validate import check_choice, check_int, check_nonnegative
from workbench.parallel.strategies.registry import COMPOSED, DEFAULT_TP, STRATEGIES
from workbench.train.choices import PRECISIONS

GRAD_BYTES = 4  # autocast keeps fp32 parameters, so gradients are reduced in fp32


@dataclass(frozen=True)
class CommEstimate:
    """Per device per step: `payload_bytes` handed to collectives, `sent_bytes` put on the links.

    Example (FSDP of a 1M-parameter model in bf16 on 4 devices):
        >>> communication_bytes("fsdp", 1_000_000, 4, precision="bf16")  # doctest: +NORMALIZE_WHITESPACE
        CommEstimate(strategy='fsdp', devices=4, payload_bytes=8000000, sent_bytes=6000000,
                     detail='all-gather params (forward, backward) + reduce-scatter gradients')
    """

    strategy: str
    devices: int
    payload_bytes: int
    sent_bytes: int
    detail: str


def ring_allreduce_bytes(size_bytes: float, devices: int) -> float:
    """Bytes each device sends in a ring all-reduce of `size_bytes`: 2(N−1)/N × size.

    Example:
        >>> ring_allreduce_bytes(100, 2)
        100.0
    """
    check_nonnegative("size_bytes", size_bytes)
    check_int("devices", devices, minimum=1)
    return 2 * (devices - 1) / devices * size_bytes


def communication_bytes(
    strategy: str,
    param_count: int,
    devices: int,
    *,
    precision: str = "fp32",
    activation_bytes: float = 0.0,
    layers: int = 1,
    tp: int = DEFAULT_TP,
    pp: int = DEFAULT_TP,
) -> CommEstimate:
    """Communication per device per training step.

    Args:
        strategy: ``"single"``, ``"ddp"``, ``"fsdp"``, ``"pipeline"`` or ``"tensor"``.
        param_count: trainable parameters of the whole model.
        devices: N, ≥ 1.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``, the compute precision (FSDP gathers parameters
            at it).
        activation_bytes: pipeline: bytes of the activation crossing one stage boundary per step (the
            gradient of the same size comes back); tensor: bytes of one layer's output that is all-reduced.
        layers: tensor: how many tensor-parallel layer pairs (column- then row-parallel Linear) there are.
        tp: ``fsdp+tp`` / ``ddp+tp``: ranks per tensor-parallel group (it divides `devices`).
        pp: ``ddp+pp``: stages per pipeline (it divides `devices`).

    Rules (G = param_count × 4 bytes of fp32 gradients, W = param_count × compute bytes):
        - ``single``: nothing.
        - ``ddp``: one all-reduce of the gradients: payload G, sent 2(N−1)/N × G.
        - ``fsdp``: all-gather the parameters in forward and again in backward, reduce-scatter the
          gradients: payload 2W + G, sent (N−1)/N × (2W + G).
        - ``pipeline``: a middle stage sends its boundary activation forward and its gradient back:
          2 × activation_bytes (the first and last stages send half of that).
        - ``tensor`` (Megatron-style, approximate): per layer pair one all-reduce of the output in forward
          and one of its gradient in backward: payload 2 × layers × activation_bytes, sent 2(N−1)/N × that.
        - ``ddp+tp`` / ``fsdp+tp`` on N = d × tp: ``tensor`` within each group of tp, plus ``ddp`` or
          ``fsdp`` over d ranks of the 1/tp of the parameters each rank holds (Linear weights counted as the
          whole model: an upper bound). ``ddp+pp`` on N = d × pp: ``pipeline`` within each pipeline, ``ddp``
          over its d replicas of the 1/pp of the parameters each stage holds.
    """
    check_choice("strategy", strategy, STRATEGIES)
    check_int("param_count", param_count, minimum=1)
    check_int("devices", devices, minimum=1)
    check_choice("precision", precision, PRECISIONS)
    check_nonnegative("activation_bytes", activation_bytes)
    check_int("layers", layers, minimum=1)
    if devices == 1 or strategy == "single":
        return CommEstimate(strategy, devices, 0, 0, "one device: no communication")
    if strategy in COMPOSED:
        inner = pp if strategy == "ddp+pp" else tp
        return _composed(strategy, param_count, devices, precision, activation_bytes, layers, inner)
    shard = (devices - 1) / devices
    grads = param_count * GRAD_BYTES
    weights = param_count * (4 if precision == "fp32" else 2)
    if strategy == "ddp":
        payload, sent, detail = grads, 2 * shard * grads, "ring all-reduce of the gradients"
    elif strategy == "fsdp":
        payload = 2 * weights + grads
        sent, detail = shard * payload, "all-gather params (forward, backward) + reduce-scatter gradients"
    elif strategy == "pipeline":
        payload = sent = 2 * activation_bytes
        detail = "boundary activation forward + its gradient backward"
    else:
        payload = 2 * layers * activation_bytes
        sent, detail = 2 * shard * payload, "all-reduce per layer pair in forward and in backward"
    return CommEstimate(strategy, devices, round(payload), round(sent), detail)


def _composed(
    strategy: str, param_count: int, devices: int, precision: str, activation: float, layers: int, inner: int
) -> CommEstimate:
    """The model dimension within each group of `inner` ranks (tensor parallel, or a pipeline's stages), the
    data strategy across the groups on the 1/inner of the model each rank holds."""
    check_int("tp or pp", inner, minimum=1)
    if devices % inner:
        raise ValueError(f"strategy={strategy!r} over groups of {inner} needs devices divisible by {inner}")
    data, tp = devices // inner, inner
    model_kind = "pipeline" if strategy.endswith("+pp") else "tensor"
    within = communication_bytes(model_kind, param_count, tp, activation_bytes=activation, layers=layers)
    held = max(1, round(param_count / tp))
    across = communication_bytes(strategy.split("+")[0], held, data, precision=precision)
    detail = f"{within.detail} (groups of {tp}); {across.detail} ({data} groups)"
    payload, sent = within.payload_bytes + across.payload_bytes, within.sent_bytes + across.sent_bytes
    return CommEstimate(strategy, devices, payload, sent, detail)
