"""Notebook 03's ring all-reduce exercise, checked on 3 live ranks (an odd ring): the reference answer passes
on every rank, and each classic slip is named."""

import pytest

from workbench.parallel.launching.rank_pool import RankPool

ANSWER = """
def ring_all_reduce(t):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(t.chunk(n))
    right, left = (rank + 1) % n, (rank - 1) % n
    received = torch.empty_like(chunks[0])
    for step in range(n - 1):  # reduce-scatter
        sending = dist.isend(chunks[(rank - step) % n].contiguous(), right)
        dist.recv(received, left)
        sending.wait()
        chunks[(rank - step - 1) % n] += received
    for step in range(ALL_GATHER_STEPS):  # all-gather
        sending = dist.isend(chunks[(rank + 1 - step) % n].contiguous(), right)
        dist.recv(received, left)
        sending.wait()
        chunks[(rank - step) % n].copy_(received)
"""
EVERYONE_SENDS_ALL = """
def ring_all_reduce(t):
    rank, n = dist.get_rank(), dist.get_world_size()
    mine, received = t.clone(), torch.empty_like(t)
    for other in range(n):
        if other != rank:
            sending = dist.isend(mine, other)
            dist.recv(received, other)
            sending.wait()
            t += received
"""


@pytest.fixture(scope="module")
def ranks():
    with RankPool(3, threads_per_process=1) as pool:
        pool.run("from workbench.exercises.ring_all_reduce import check_ring_all_reduce")
        yield pool


def _check(pool, code):
    run = pool.run(code + "\nprint(check_ring_all_reduce(ring_all_reduce))")
    return {
        rank: (cell.failure.message if cell.failure else run.text(rank)) for rank, cell in run.cells.items()
    }


def test_the_reference_ring_passes_on_every_rank(ranks):
    said = _check(ranks, ANSWER.replace("ALL_GATHER_STEPS", "n - 1"))
    assert said == {
        r: f"rank {r}: ring_all_reduce gives the sum over 3 rank(s), sending 400 bytes: 2(N−1)/N = 1.33333× "
        "the tensor's 300\n"
        for r in range(3)
    }


@pytest.mark.parametrize(
    ("code", "named"),
    [
        (ANSWER.replace("ALL_GATHER_STEPS", "0"), "the reduce-scatter worked, the all-gather"),
        ("def ring_all_reduce(t):\n    dist.all_reduce(t)", "called dist.all_reduce on rank"),
        ("def ring_all_reduce(t):\n    return t", "the tensor is unchanged"),
        (
            EVERYONE_SENDS_ALL,
            "sent 600 bytes; a ring sends 2(N−1)/N of the tensor: 2 × 2 chunks of 25 floats",
        ),
    ],
)
def test_each_slip_is_named_on_every_rank(ranks, code, named):
    said = _check(ranks, code)
    assert all(named in message for message in said.values()), said
