"""The presets' names and what each trains, without torch: ``workbench train --list`` and a misspelt preset
name answer at once (``workbench.presets`` builds the experiments and imports torch, ~3 s).

Example:
    >>> list(PRESET_DESCRIPTIONS)[:2]
    ['digits-mlp', 'regression-linear']
    >>> check_preset("digit-mlp")
    Traceback (most recent call last):
    ...
    ValueError: preset='digit-mlp' is not known; did you mean 'digits-mlp'? allowed values: 'digits-mlp', ...
"""

from __future__ import annotations

import difflib

PRESET_DESCRIPTIONS: dict[str, str] = {
    "digits-mlp": "MLP (64-128-128-10) on the 8×8 digits, Adam",
    "regression-linear": "linear regression on y = X·w + b + 0.1·ε (1M × 10), SGD with momentum",
    "images-cnn": "small CNN on 10k synthetic 3×32×32 images, 10 classes, AdamW",
    "images-cnn-head": "small CNN with a 64-wide MLP head (tensor-parallel friendly) on the synthetic "
    "images, AdamW",
    "text-transformer": "character GPT (d_model 64, 4 heads, 2 blocks) on 2,048 × 32 characters of grammar "
    "text, AdamW",
}


def check_preset(name: object) -> str:
    """`name` if it is a preset's, else ValueError with the closest name and the allowed ones."""
    if name in PRESET_DESCRIPTIONS:
        return str(name)
    close = difflib.get_close_matches(str(name), PRESET_DESCRIPTIONS, n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]!r}? allowed" if close else "; allowed"
    raise ValueError(
        f"preset={name!r} is not known{guess} values: {', '.join(map(repr, PRESET_DESCRIPTIONS))}"
    )
