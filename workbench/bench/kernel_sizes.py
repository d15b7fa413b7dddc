"""The problem sizes of the kernel benchmark, shared by what it measures (`workbench.bench.kernels`, on a
GPU) and what it predicts (`workbench.bench.kernels_static`, no GPU).

Example:
    >>> SIZES[False]["matmul"], SIZES[True]["params"] // MILLION
    (4096, 10)
"""

MILLION = 1_000_000
# quick (True) / full (False) sizes: matmul n, vector length (sum, norm), parameters (SGD, Adam, clipping),
# (rows, classes) of the cross-entropy
SIZES = {
    True: {"matmul": 2048, "vector": 16 * MILLION, "params": 10 * MILLION, "xent": (4096, 1000)},
    False: {"matmul": 4096, "vector": 100 * MILLION, "params": 100 * MILLION, "xent": (32768, 1000)},
}
# (M, K, N) of the kernels issue's other matmul shapes, measured in full runs: 1024³ (64 tiles of 128×128, a
# grid smaller than an H100's 132 SMs) and 8192×1024×8192
MATMUL_SHAPES = ((1024, 1024, 1024), (8192, 1024, 8192))
WIDE_XENT = (8192, 50_000)  # the kernels issue's size, a language model's vocabulary: measured in full runs
