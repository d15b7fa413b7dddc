"""Resource estimates for training: does it fit, how long per step and epoch, which strategy.

`estimate_memory` (bytes per device), `largest_batch_size` (the largest batch that fits a device),
`communication_bytes` (bytes sent per step), `predict_step_time` (roofline step time), and
`measure_training_step`, the measurement the memory estimates are tested against.

Example:
    >>> import torch
    >>> from workbench import models
    >>> model = models.mlp(64, 10)
    >>> memory = estimate_memory(model, sample=torch.zeros(1, 64), batch_size=64, strategy="ddp", devices=2)
    >>> comm = communication_bytes("ddp", memory.grads // 4, 2)
    >>> comm.sent_bytes == memory.grads
    True
"""

from workbench.estimate.batch_fit import BatchFit, largest_batch_size
from workbench.estimate.comm import CommEstimate, communication_bytes, ring_allreduce_bytes
from workbench.estimate.measure import BucketLog, StepMemory, counting_allreduce_hook, measure_training_step
from workbench.estimate.memory import Cluster, MemoryEstimate, estimate_memory, optimizer_state_tensors
from workbench.estimate.profile import ModelProfile, profile_model
from workbench.estimate.step_time import StepTimeEstimate, forward_flops, predict_step_time, training_flops

__all__ = [
    "BatchFit",
    "BucketLog",
    "Cluster",
    "CommEstimate",
    "MemoryEstimate",
    "ModelProfile",
    "StepMemory",
    "StepTimeEstimate",
    "communication_bytes",
    "counting_allreduce_hook",
    "estimate_memory",
    "forward_flops",
    "largest_batch_size",
    "measure_training_step",
    "optimizer_state_tensors",
    "predict_step_time",
    "profile_model",
    "ring_allreduce_bytes",
    "training_flops",
]
