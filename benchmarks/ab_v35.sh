#!/usr/bin/env bash
# The v35 device calls for the norms: LayerNorm's 16-bit backward rows of K = 3 packs staged since v33 (teams of 256
# and 512) read from their stages in both passes, the partials in registers (norm_bwd_lean_kernel's kSmemRows, v34's
# form for the f32 rows; cpp/norms.cu norm_bwd_version: =v34 the kernels before). Calls 1-3 ran trees with more options
# (tables call1_*, call2_*, call3_*): the same for every staged 16-bit row of both norms (call 1's default), three
# stages (=v35-3), and the 512-thread teams at two blocks per SM of 64 registers (=v35-occ, stage occ: each process
# timing its default grid against the paired one, partials_ab.py's team_block=1024,teams=32).
#   btest    the norm backward versions' GPU tests for BT_VERSIONS (default "default v34").
#   ab       benchmarks/partials_ab.py once per kernel version, one process each (AB_VERSIONS, default "v34 v35 v34":
#            the last the processes' A/A), AB_OPS (default layer_norm rms_norm) in AB_DIRS (default bwd) at AB_COLS
#            (default 5000 6144 8200 10000 12288) in AB_DTYPES (default bfloat16); each version's ms against the first
#            one's (files tagged AB_TAG, default stage).
#   sanr     compute-sanitizer memcheck and racecheck side by side over the norms' backward kernels, each resumed where
#            the tool itself crashes (ab_sanitize_resume).
#   big      the > 2^31-element LayerNorm and RMSNorm backward tests.
#   ptest    the norms' backward GPU tests (paired blocks, determinism, partials, gradients).
#   verify   btest then big, beside ptest and sanr.
#   nbench   the bench's RMSNorm and LayerNorm backward and forward + backward, f32 and bf16, device timing.
#   packs    benchmarks/norm_fwd_ab.cu packs-more, two rounds (the f32 forward's lean rows at 3, 4, 6, 8 packs per
#            thread against v29's rule at C = 2048 / 4096; call 7 ran the same by hand).
set -uo pipefail
source "$(dirname "$0")/ab_lib.sh"

stage_btest() { ab_norm_btest "default v34" 3; }

stage_ab() {
  # shellcheck disable=SC2086
  ab_norm_versions "${AB_TAG:-stage}" "v34 v35 v34" --ops ${AB_OPS:-layer_norm rms_norm} \
    --dirs ${AB_DIRS:-bwd} --cols ${AB_COLS:-5000 6144 8200 10000 12288} --dtypes ${AB_DTYPES:-bfloat16}
}

stage_sanr() { ab_norm_sanr v35; }

stage_big() { ab_norm_big; }

stage_ptest() { ab_norm_ptest; }

stage_verify() { ab_norm_verify; }

stage_nbench() { ab_norm_nbench; }

stage_packs() { IN_OPS=packs-more IN_ROUNDS="1 2" ab_inproc; }

ab_init "$@"
ab_run v35
