"""The names `TrainConfig`'s choice fields accept, importable without torch: the command line's parser
lists them (``workbench --help`` and every command start without importing the training stack).

>>> from workbench.train.choices import PRECISIONS
>>> PRECISIONS
('fp32', 'bf16', 'fp16')
"""

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "cosine", "linear")
PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
