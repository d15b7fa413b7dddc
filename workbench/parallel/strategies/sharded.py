"""What the strategies whose parameters are DTensors (tensor parallel, FSDP) share: a device mesh over all
ranks and whole-model state dicts.

Checkpoints and results hold the *whole* model and optimizer state, keyed by parameter name, gathered to
rank 0 with torch's ``torch.distributed.checkpoint.state_dict`` API; loading gives each rank its shards
again. So a run trained with FSDP can be resumed with tensor parallelism, or the other way round.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workbench.parallel.strategies.distributed import DistributedStrategy
from workbench.train.step_time import Clock
from workbench.train.strategy import check_state_fits


class ShardedStrategy(DistributedStrategy):
    """A `DistributedStrategy` whose model holds DTensors on a 1-D device mesh of every rank."""

    def backward(self, loss: torch.Tensor, clock: Clock) -> None:
        self.split_collectives(clock, "forward")
        super().backward(loss, clock)
        self.split_collectives(clock, "backward")

    def split_collectives(self, clock: Clock, phase: str) -> None:
        """Count the collectives this rank waited for during `phase` (just marked) as communication; here
        they cannot be separated, and the step says so (FSDP on CPU overrides this)."""
        clock.explain(
            f"{self.name}: the collectives (all-gathers, reduce-scatters, all-reduces) run inside forward "
            "and backward and are counted there"
        )

    def mesh(self) -> Any:
        """A device mesh of every rank, on this rank's device type."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device.type, (self.world_size,))

    def model_state(self, model: nn.Module) -> dict[str, Any] | None:
        """The whole model's state dict (full tensors, on CPU) on rank 0; every rank calls it."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = get_model_state_dict(model, options=_full())
        return state if self.is_main else None

    def load_model_state(self, model: nn.Module, state: dict[str, Any]) -> None:
        """Shard a whole-model state dict (every rank has it) onto this rank."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        check_state_fits(model.state_dict(), state)  # sharded tensors report their whole shape
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The whole optimizer state, keyed by parameter name, on rank 0 (empty elsewhere)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(model, optimizer, options=_full())
        return state if self.is_main else {}

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        saved = state.get("state", {}).values()
        if not any(torch.is_tensor(v) and v.dim() > 0 for entry in saved for v in entry.values()):
            # nothing to shard (plain SGD keeps no state), where torch's loader finds no device and asserts
            for group, kept in zip(optimizer.param_groups, state.get("param_groups", []), strict=False):
                group.update({name: value for name, value in kept.items() if name != "params"})
            return
        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def _full() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)
