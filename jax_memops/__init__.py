"""jax_memops: handwritten CUDA and C++ kernels for the memory-bound ops of deep learning, as JAX ops.

    import jax_memops as jm
    jm.softmax(x, axis=-1, algorithm="auto")
    jm.layer_norm(x, scale, bias, epsilon=1e-5, axis=-1, dtype=None)
    jm.rms_norm(x, scale, epsilon=1e-6, axis=-1, dtype=None)
    jm.scale_bias_gelu(x, scale=1.0, bias=0.0)

Each is a JAX primitive lowered to an XLA FFI custom call (C++ on CPU, CUDA on NVIDIA GPUs) with a
dedicated backward kernel, and works under jit, grad, vmap, scan and checkpoint.
"""

import importlib

from ._ext import build_info
from .gelu import scale_bias_gelu
from .norms import layer_norm, rms_norm
from .softmax import SOFTMAX_ALGORITHMS, softmax

__version__ = build_info()["version"]


def __getattr__(name):
    # jm.nnx / jm.linen (drop-in Flax layers) are imported on first access, so that `import jax_memops`
    # never imports Flax: it is an optional dependency (`pip install "jax_memops[flax]"`).
    if name in ("nnx", "linen"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SOFTMAX_ALGORITHMS",
    "build_info",
    "layer_norm",
    "rms_norm",
    "scale_bias_gelu",
    "softmax",
]
