"""The warp access model of notebook 01: sector counts for strided loads, bank conflicts for tile columns."""

import pytest

from workbench.devices.access_patterns import bank_conflict_ways, bytes_used_fraction, sectors_per_request


@pytest.mark.parametrize(
    ("stride", "sectors", "used"), [(1, 4, 1.0), (2, 8, 0.5), (4, 16, 0.25), (8, 32, 0.125), (33, 32, 0.125)]
)
def test_strided_float_loads_touch_more_sectors_and_use_fewer_of_their_bytes(stride, sectors, used):
    lanes = [lane * stride for lane in range(32)]
    assert sectors_per_request(lanes) == sectors and bytes_used_fraction(lanes) == used


def test_a_misaligned_contiguous_load_touches_one_more_sector():
    assert sectors_per_request(range(3, 35)) == 5


@pytest.mark.parametrize(
    ("words", "ways"),
    [
        ([lane for lane in range(32)], 1),  # a row: one word per bank
        ([7] * 32, 1),  # every lane the same word: a broadcast
        ([lane * 2 for lane in range(32)], 2),  # stride 2: two words per even bank
        ([lane * 32 for lane in range(32)], 32),  # a column of a 32-wide tile
        ([lane * 33 for lane in range(32)], 1),  # the column with rows padded to 33
        ([lane * 64 + 5 for lane in range(32)], 32),
    ],
)
def test_bank_conflicts_count_distinct_words_per_bank(words, ways):
    assert bank_conflict_ways(words) == ways
