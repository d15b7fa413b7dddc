import re

import pytest
import torch

from workbench.data import decode, encode, generate_text, load_dataset
from workbench.data.text import VOCAB


def test_the_text_is_one_stream_per_seed():
    long = generate_text(5000, seed=3)
    assert len(long) == 5000 and generate_text(5000, seed=3) == long
    assert generate_text(1234, seed=3) == long[:1234]  # a shorter text is a prefix of a longer one
    assert generate_text(5000, seed=4) != long


def test_vocab_is_every_character_the_grammar_makes_whatever_the_seed():
    assert list(VOCAB) == sorted(set(VOCAB))
    for seed in (0, 1):
        assert set(generate_text(50_000, seed=seed)) == set(VOCAB)


def test_the_text_follows_the_grammar():
    text = generate_text(20_000, seed=0)
    sentences = re.split(r"(?<=[.!])[ \n]", text)[:-1]  # the last one may be cut off
    assert len(sentences) > 100
    assert all(s[0].isupper() and s[-1] in ".!" and s[1:].islower() for s in sentences)
    assert not re.search(r"\ba [aeiou]", text, flags=re.IGNORECASE)  # "an" before a vowel
    assert not re.search(r"\ban [^aeiou]", text, flags=re.IGNORECASE)
    assert "\n" in text and "," in text and "!" in text


def test_generate_text_checks_its_length():
    with pytest.raises(ValueError, match="n_chars must be an integer ≥ 1, got 0"):
        generate_text(0)


def test_text_dataset_shapes_and_metadata():
    data = load_dataset("text", n_samples=2048, context=32, seed=0)
    assert data.features.shape == data.targets.shape == (2048, 32)
    assert data.features.dtype == data.targets.dtype == torch.int64
    assert data.task == "classification" and data.num_classes == len(VOCAB)
    assert int(data.features.min()) >= 0 and int(data.features.max()) < len(VOCAB)
    assert data.info["vocab"] == VOCAB and data.info["context"] == 32 and data.info["seed"] == 0
    assert data.info["stride"] == 32 and data.info["text"] == generate_text(300, seed=0)
    assert repr(data) == f"Dataset('text', 2048 samples, features (32,) int64, {len(VOCAB)} classes)"


def test_windows_tile_the_text_and_targets_are_the_next_characters():
    data = load_dataset("text", n_samples=50, context=8, seed=5)
    text = generate_text(50 * 8 + 1, seed=5)
    for i in (0, 17, 49):
        assert decode(data.features[i], VOCAB) == text[8 * i : 8 * i + 8]
        assert decode(data.targets[i], VOCAB) == text[8 * i + 1 : 8 * i + 9]
    assert torch.equal(data.targets[:, :-1], data.features[:, 1:])
    assert torch.equal(data.targets[:-1, -1], data.features[1:, 0])  # windows do not overlap


def test_text_dataset_is_deterministic_by_seed_and_grows_by_prefix():
    a, b = (load_dataset("text", n_samples=100, context=16, seed=7) for _ in range(2))
    assert torch.equal(a.features, b.features) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.features, load_dataset("text", n_samples=100, context=16, seed=8).features)
    more = load_dataset("text", n_samples=300, context=16, seed=7)
    assert torch.equal(more.features[:100], a.features) and torch.equal(more.targets[:100], a.targets)
    assert load_dataset("text", n_samples=3, seed=1).info["vocab"] == VOCAB


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_samples": 0}, "n_samples must be an integer ≥ 1"),
        ({"context": 1}, "context must be an integer ≥ 2"),
        ({"context": 8.0}, "context must be an integer ≥ 2"),
    ],
)
def test_text_dataset_checks_its_options(options, message):
    with pytest.raises(ValueError, match=message):
        load_dataset("text", **options)


def test_encode_decode_round_trip():
    text = generate_text(1000, seed=2)
    ids = encode(text, VOCAB)
    assert ids.dtype == torch.int64 and ids.shape == (1000,)
    assert decode(ids, VOCAB) == text and decode(ids.tolist(), VOCAB) == text
    assert encode("", VOCAB).shape == (0,) and decode([], VOCAB) == ""
    assert encode("héé", "éh").tolist() == [1, 0, 0]  # any characters, not only ASCII


def test_encode_names_a_character_outside_the_vocab():
    with pytest.raises(ValueError, match=r"character '\?' is not in the vocab; allowed characters"):
        encode("Who?", VOCAB)


def test_encode_rejects_a_vocab_that_repeats_a_character():
    with pytest.raises(ValueError, match=r"vocab repeats the characters \['a'\]"):
        encode("a", "aba")


def test_decode_rejects_batches_and_ids_outside_the_vocab():
    with pytest.raises(ValueError, match=r"ids must be 1-D, got shape \(2, 3\)"):
        decode(torch.zeros(2, 3, dtype=torch.int64), VOCAB)
    with pytest.raises(
        ValueError, match=rf"id {len(VOCAB)} is outside the vocab; allowed ids: 0 \.\. {len(VOCAB) - 1}"
    ):
        decode([0, len(VOCAB)], VOCAB)
    with pytest.raises(ValueError, match="id -1 is outside the vocab"):
        decode([-1], VOCAB)
