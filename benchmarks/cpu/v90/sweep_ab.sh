#!/bin/bash
# v90 (RESULTS.md "The CPU handlers, v90"): the bench's sweep, the old build (site-packages) and the new one
# (pip install --target /tmp/v90) alternating, three rounds; outputs in /tmp/ab90.
for r in 1 2 3; do for v in old new; do
  pp=""; [ $v = new ] && pp=/tmp/v90
  PYTHONPATH=$pp jax-memops bench --parts sweep --ops gelu --dtypes float32 bfloat16 float16 --cols 1000 32768 2097152 \
    --elements 2097152 --out /tmp/ab90/o_${v}_g$r > /tmp/ab90/${v}_gelu_$r.txt 2>/dev/null
  PYTHONPATH=$pp jax-memops bench --parts sweep --ops softmax layer_norm rms_norm --dirs fwd fwd+bwd \
    --dtypes float32 float16 --cols 1000 32768 --elements 2097152 --out /tmp/ab90/o_${v}_n$r \
    > /tmp/ab90/${v}_norms_$r.txt 2>/dev/null
done; done
echo done
