"""How rank processes start and talk: `launcher` (`launch`, `Launch`: a fork server, events and controls
relayed, everyone stopped on a failure), `_worker` (one rank), `shared_arrays` (large tensors mapped, not
copied), `multi_node` (torchrun and gloo on machines whose name resolves to loopback), `spark`
(TorchDistributor) and `rank_pool` (persistent ranks that run notebook cells: ``%%ranks``). Builds on
`workbench.parallel.strategies` and `workbench.parallel.group`."""
