"""A character-level text corpus made offline from a small grammar, and its encode/decode helpers.

Sentences follow ``[Adverb,] Det [Adj] Subject Verb Det [Adj] Object [adverb] (.|!)``: "an" before a vowel,
a capital at the start, a space or (one time in four) a newline between sentences. A tiny transformer
learns the spelling, the word order and the article rule within a few hundred steps.

``generate_text(n, seed)`` is the first ``n`` characters of one endless stream per seed, so a longer text
starts with the shorter one. `VOCAB` is every character the grammar can produce, sorted: it is the same
for every seed and length.

    >>> text = generate_text(60, seed=0)
    >>> len(text), set(text) <= set(VOCAB)
    (60, True)
    >>> decode(encode("the cat", VOCAB), VOCAB)
    'the cat'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from workbench._validate import check_int

DETERMINERS = ("the", "a")
ADJECTIVES = ("small", "big", "quick", "lazy", "red", "happy", "old", "angry")
SUBJECTS = ("cat", "dog", "bird", "fox", "girl", "boy", "robot", "farmer")
VERBS = ("sees", "likes", "chases", "finds", "helps", "hears", "follows", "jumps over")
OBJECTS = ("ball", "tree", "house", "river", "cake", "hat", "moon", "owl")
ADVERBS = ("today", "again", "quietly", "slowly", "often", "yesterday")
_VOWELS = frozenset("aeiou")
_CHUNK = 64  # sentences drawn per batch of random numbers; fixed, so the stream does not depend on length


def _alphabet() -> str:
    words = DETERMINERS + ADJECTIVES + SUBJECTS + VERBS + OBJECTS + ADVERBS + ("an",)
    capitals = {w[0].upper() for w in DETERMINERS + ADVERBS + ("an",)}  # sentence starts
    return "".join(sorted(set("".join(words)) | capitals | set(" ,.!\n")))


VOCAB = _alphabet()


def generate_text(n_chars: int, *, seed: int = 0) -> str:
    """The first `n_chars` characters of the grammar's text stream for `seed` (numpy ``default_rng``)."""
    check_int("n_chars", n_chars, minimum=1)
    rng = np.random.default_rng(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        for sentence in _sentences(rng, _CHUNK):
            parts.append(sentence)
            size += len(sentence)
    return "".join(parts)[:n_chars]


def _sentences(rng: np.random.Generator, n: int) -> list[str]:
    """`n` sentences, each with its separator; one batch of random draws per slot."""
    det = rng.integers(0, len(DETERMINERS), (n, 2))
    adj = rng.integers(0, len(ADJECTIVES), (n, 2))
    has_adj = rng.random((n, 2)) < 0.4
    subject = rng.integers(0, len(SUBJECTS), n)
    verb = rng.integers(0, len(VERBS), n)
    obj = rng.integers(0, len(OBJECTS), n)
    adverb = rng.integers(0, len(ADVERBS), n)
    place = rng.random(n)  # < 0.15: adverb first, < 0.45: adverb last, else none
    exclaim = rng.random(n) < 0.2
    newline = rng.random(n) < 0.25
    out = []
    for i in range(n):
        subject_phrase = _noun_phrase(det[i, 0], has_adj[i, 0], adj[i, 0], SUBJECTS[subject[i]])
        object_phrase = _noun_phrase(det[i, 1], has_adj[i, 1], adj[i, 1], OBJECTS[obj[i]])
        words = f"{subject_phrase} {VERBS[verb[i]]} {object_phrase}"
        if place[i] < 0.15:
            words = f"{ADVERBS[adverb[i]]}, {words}"
        elif place[i] < 0.45:
            words = f"{words} {ADVERBS[adverb[i]]}"
        end = "!" if exclaim[i] else "."
        out.append(words[0].upper() + words[1:] + end + ("\n" if newline[i] else " "))
    return out


def _noun_phrase(det: int, has_adj: bool, adj: int, noun: str) -> str:
    words = [ADJECTIVES[adj], noun] if has_adj else [noun]
    article = DETERMINERS[det]
    if article == "a" and words[0][0] in _VOWELS:
        article = "an"
    return " ".join([article, *words])


def encode(text: str, vocab: str) -> torch.Tensor:
    """Token ids of `text`: the index of each character in `vocab`, as a 1-D int64 tensor.

    Args:
        text: the characters to encode.
        vocab: the alphabet, each character once (e.g. `VOCAB`).

    Raises:
        ValueError: a character of `text` is not in `vocab`, or `vocab` repeats a character.

    Example:
        >>> encode("a b", "ab ")
        tensor([0, 2, 1])
    """
    index = {char: i for i, char in enumerate(vocab)}
    if len(index) != len(vocab):
        repeated = sorted({c for c in vocab if vocab.count(c) > 1})
        raise ValueError(f"vocab repeats the characters {repeated}; each character must appear once")
    if not text:
        return torch.zeros(0, dtype=torch.int64)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    distinct, inverse = np.unique(codes, return_inverse=True)
    ids = np.empty(len(distinct), dtype=np.int64)
    for j, code in enumerate(distinct.tolist()):
        char = chr(code)
        if char not in index:
            raise ValueError(f"character {char!r} is not in the vocab; allowed characters: {vocab!r}")
        ids[j] = index[char]
    return torch.from_numpy(ids[inverse.reshape(-1)])


def decode(ids: torch.Tensor | Sequence[int], vocab: str) -> str:
    """The text of 1-D token `ids` (a tensor or a sequence of ints) in `vocab`.

    Raises:
        ValueError: `ids` is not 1-D, or an id is outside ``0 .. len(vocab) - 1``.

    Example:
        >>> decode([0, 2, 1], "ab ")
        'a b'
    """
    ids = torch.as_tensor(ids, dtype=torch.int64)
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}; decode one sequence at a time")
    values = ids.tolist()
    bad = [i for i in values if not 0 <= i < len(vocab)]
    if bad:
        raise ValueError(f"id {bad[0]} is outside the vocab; allowed ids: 0 .. {len(vocab) - 1}")
    return "".join(vocab[i] for i in values)
