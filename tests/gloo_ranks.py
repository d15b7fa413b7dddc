"""Run a test function on N spawned gloo ranks and collect what each returns.

Each rank joins the process group, calls ``fn(rank, world_size)`` and then leaves the group the way the
launcher's workers do (`leave_process_group`: a barrier, a gc pass, then destroy), after ``fn``'s frame
and every DDP module in it are gone. Destroying the group while a DDP model is still alive, or while the
other rank still talks, can abort a rank with "terminate called without an active exception".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def run_on_gloo_ranks(fn: Callable[[int, int], Any], world_size: int, port: int) -> list[Any]:
    """``[fn(0, world_size), fn(1, world_size), …]``, each computed in its own spawned gloo rank."""
    results = mp.get_context("spawn").SimpleQueue()
    ranks = mp.start_processes(
        _rank, args=(fn, world_size, port, results), nprocs=world_size, start_method="spawn", join=False
    )
    by_rank: dict[int, Any] = {}
    ended = False
    while not ended:  # read while the ranks run: a result larger than the pipe's buffer blocks its rank
        ended = ranks.join(timeout=0.1)  # raises, naming the rank, if one failed
        while not results.empty():
            rank, value = results.get()
            by_rank[rank] = value
    return [by_rank[rank] for rank in range(world_size)]


def _rank(rank: int, fn: Callable[[int, int], Any], world_size: int, port: int, results) -> None:
    import torch.distributed as dist

    from workbench.parallel.group.process_group import leave_process_group

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        results.put((rank, fn(rank, world_size)))
    except BaseException:
        leave_process_group(wait_for_others=False)
        raise
    leave_process_group(wait_for_others=True)
