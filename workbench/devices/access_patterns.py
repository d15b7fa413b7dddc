"""How one warp's memory accesses map onto the hardware: DRAM sectors (coalescing) and shared-memory banks.

A counting model of the rules NVIDIA documents (CUDA C++ Best Practices Guide, "Coalesced access to global
memory" and "Shared memory"), for reading an access pattern without a GPU:

- **Global memory** moves in 32-byte sectors. A warp's load is served by every distinct sector its 32 lanes
  touch: 32 consecutive floats need 4 (128 bytes, all used); a stride of 2 floats needs 8 (half the bytes
  moved are used); a stride of 8 or more floats, one sector per lane (32; 1/8 used).
- **Shared memory** has 32 banks, each 4 bytes wide: word ``w`` sits in bank ``w % 32``. Lanes asking one
  bank for *different* words are served one after another (an n-way conflict takes n passes); lanes reading
  the *same* word share one broadcast. A column of a 32 × 32 float tile is a 32-way conflict; padding each
  row to 33 words spreads the column over all 32 banks.

Caches (L1/L2) and the hardware's exact replay rules are left out: these are the counts the guide uses.

Example:
    >>> sectors_per_request([lane for lane in range(32)])  # consecutive floats
    4
    >>> bank_conflict_ways([lane * 32 for lane in range(32)])  # a column of a 32 × 32 tile
    32
    >>> bank_conflict_ways([lane * 33 for lane in range(32)])  # the same column, rows padded to 33
    1
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

WARP = 32  # lanes (threads) per warp
SECTOR_BYTES = 32  # the unit DRAM traffic moves in
BANKS, BANK_BYTES = 32, 4  # shared memory: banks, and the width of each


def sectors_per_request(element_indices: Iterable[int], element_bytes: int = 4) -> int:
    """The distinct 32-byte sectors one warp's load or store touches (its lanes' element indices)."""
    return len({index * element_bytes // SECTOR_BYTES for index in element_indices})


def bytes_used_fraction(element_indices: Iterable[int], element_bytes: int = 4) -> float:
    """The share of the bytes moved that the lanes asked for (1.0: perfectly coalesced)."""
    indices = set(element_indices)
    return len(indices) * element_bytes / (sectors_per_request(indices, element_bytes) * SECTOR_BYTES)


def bank_conflict_ways(word_indices: Iterable[int]) -> int:
    """The passes one warp's shared-memory access takes: the most distinct 4-byte words any bank serves."""
    words_by_bank: dict[int, set[int]] = defaultdict(set)
    for word in word_indices:
        words_by_bank[word % BANKS].add(word)
    return max(len(words) for words in words_by_bank.values())
