#!/bin/bash
# v91 (RESULTS.md "The CPU handlers, v91"): the bench's softmax on few long rows, the old build (site-packages) and the
# new one (pip install --target /tmp/v91) alternating, ROUNDS (2) rounds; outputs in /tmp/ab91.
mkdir -p /tmp/ab91
for r in $(seq "${ROUNDS:-2}"); do for v in old new; do
  pp=""; [ $v = new ] && pp=/tmp/v91
  for spec in "131072 131072" "262144 262144" "1048576 1048576" "131072 262144" "131072 524288" "50257 50257" \
      "1000 64000"; do
    set -- $spec
    PYTHONPATH=$pp jax-memops bench --parts sweep --ops softmax --dtypes float32 bfloat16 --cols $1 --elements $2 \
      --out /tmp/ab91/o 2>/dev/null | grep "^softmax"
  done > /tmp/ab91/${v}_$r.txt
done; done
echo done
