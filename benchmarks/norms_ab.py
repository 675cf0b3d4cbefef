"""A/B of the LayerNorm / RMSNorm forward versions (cpp/norm_fwd.cu's JAX_MEMOPS_NORM_FWD: v3, norm_rows.cuh,
and v4, norm_fwd_half.cuh, each forced for every dtype; the default takes v4 for f32, v3 for 16-bit) on
one GPU: benchmarks/softmax_ab.py with the norms' defaults, one process per version, one table (TB/s,
% of copy, vs v3, vs XLA).

    python3 benchmarks/norms_ab.py --out ab-norms [--versions v3 v4] [bench options, e.g.
        --cols 768 1024 2048 4096 8192 12288 --dtypes float32 bfloat16]"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import softmax_ab  # noqa: E402

if __name__ == "__main__":
    sys.exit(softmax_ab.main(var="JAX_MEMOPS_NORM_FWD", ops=("layer_norm", "rms_norm"), versions=("v3", "v4"),
                             out="norms-ab"))
