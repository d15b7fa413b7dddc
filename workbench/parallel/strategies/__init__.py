"""What happens to a model and its gradients over the ranks of a process group: `DistributedStrategy` and
`DataParallel`, `FullyShardedDataParallel`, `PipelineParallel`, `TensorParallel`; `registry` names them
(it imports neither torch nor ``torch.distributed``, so keep this file free of imports). Strategies never
start processes: that is `workbench.parallel.launching`, which builds on them."""
