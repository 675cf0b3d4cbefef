"""A model-level number: forward + backward of one GPT-2-style transformer block in bfloat16, with the
jm ops (layer_norm, attention softmax, bias + GELU) against the same block on XLA's formulations.

Same parameters, inputs and dtypes on both sides; only the three memory-bound ops differ. Inside a model
a custom call is a fusion barrier (XLA cannot fuse it into the neighbouring matmul epilogues), so this
number can be lower than the per-op speedups suggest.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

import jax_memops as jm

from . import reference
from .bench import max_rel_diff, time_interleaved


@dataclass(frozen=True)
class BlockConfig:
    batch: int = 8
    seq: int = 1024
    width: int = 768  # GPT-2 small
    heads: int = 12


QUICK_CONFIG = BlockConfig(batch=2, seq=32, width=64, heads=4)

_OPS = {
    "jm": (jm.layer_norm, jm.softmax, jm.scale_bias_gelu),
    "xla": (reference.layer_norm, reference.softmax, reference.scale_bias_gelu),
}


def init_params(cfg: BlockConfig, key) -> dict:
    d, bf16 = cfg.width, jnp.bfloat16
    ks = jax.random.split(key, 8)

    def dense(k, n_in, n_out):
        return (jax.random.normal(k, (n_in, n_out), jnp.float32) / n_in ** 0.5).astype(bf16)

    return {
        "ln1_scale": 1 + 0.1 * jax.random.normal(ks[0], (d,)), "ln1_bias": 0.1 * jax.random.normal(ks[1], (d,)),
        "ln2_scale": 1 + 0.1 * jax.random.normal(ks[2], (d,)), "ln2_bias": 0.1 * jax.random.normal(ks[3], (d,)),
        "w_qkv": dense(ks[4], d, 3 * d), "w_out": dense(ks[5], d, d),
        "w_fc": dense(ks[6], d, 4 * d), "b_fc": 0.1 * jax.random.normal(ks[7], (4 * d,)),
        "w_proj": dense(jax.random.fold_in(key, 9), 4 * d, d),
    }


def block(params: dict, x, cfg: BlockConfig, ops: str):
    layer_norm, softmax, scale_bias_gelu = _OPS[ops]
    b, t, d, h = x.shape[0], x.shape[1], cfg.width, cfg.heads
    y = layer_norm(x, params["ln1_scale"], params["ln1_bias"])
    q, k, v = jnp.split(y @ params["w_qkv"], 3, axis=-1)
    q, k, v = (z.reshape(b, t, h, d // h).transpose(0, 2, 1, 3) for z in (q, k, v))
    logits = (q @ k.transpose(0, 1, 3, 2)) * jnp.asarray((d // h) ** -0.5, x.dtype)
    causal = jnp.tril(jnp.ones((t, t), bool))
    attn = softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
    x = x + (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ params["w_out"]
    y = layer_norm(x, params["ln2_scale"], params["ln2_bias"])
    y = scale_bias_gelu(y @ params["w_fc"], 1.0, params["b_fc"])
    return x + y @ params["w_proj"]


def _fwd_bwd_vs_xla(forward, params, x, cfg, label: str, iters: int | None, reps: int,
                    timing: str = "wall") -> dict:
    """Jitted value_and_grad of mean(forward(params, x, ops)^2) for ops "jm" and "xla": checked against each
    other (bf16 activations through a whole block: 5e-2), then timed interleaved."""
    def step(ops):
        def loss(p, x):
            return jnp.mean(jnp.square(forward(p, x, ops).astype(jnp.float32)))
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

    ours, xla = step("jm"), step("xla")
    diff = max_rel_diff(ours(params, x), xla(params, x))
    if not diff <= 5e-2:
        raise AssertionError(f"{label}: jm and XLA disagree, max relative difference {diff:.3g}")
    ours_ms, xla_ms = time_interleaved([lambda: ours(params, x), lambda: xla(params, x)], iters, reps, timing)
    return {"config": cfg.__dict__, "dtype": "bfloat16", "max_rel_diff": diff, "jm_ms": ours_ms,
            "xla_ms": xla_ms, "speedup": xla_ms / ours_ms}


def run(cfg: BlockConfig, key, iters: int | None, reps: int, timing: str = "wall") -> dict:
    params = init_params(cfg, key)
    x = jax.random.normal(jax.random.fold_in(key, 1), (cfg.batch, cfg.seq, cfg.width)).astype(jnp.bfloat16)
    return _fwd_bwd_vs_xla(lambda p, x, ops: block(p, x, cfg, ops), params, x, cfg, "transformer block",
                           iters, reps, timing)


# -- the MLP block: where a custom call meets XLA's matmul epilogue fusion (issue 6) -------------------
@dataclass(frozen=True)
class MlpConfig:
    tokens: int = 8 * 1024
    width: int = 768  # hidden = 4 * width: GPT-2 small; 4096 for a wide layer


MLP_CONFIGS = (MlpConfig(8 * 1024, 768), MlpConfig(4 * 1024, 4096))
QUICK_MLP_CONFIGS = (MlpConfig(64, 32),)


def mlp(params: dict, x, ops: str):
    """Dense -> bias + GELU (tanh form) -> Dense in bfloat16, f32 bias. With "jm" the bias + GELU is one
    custom call; with "xla" it is jax.nn.gelu(h + b), which XLA may fuse into the first matmul's
    epilogue (then the activation never makes a round trip through HBM on its own)."""
    h = x @ params["w_fc"]
    if ops == "jm":
        h = jm.scale_bias_gelu(h, 1.0, params["b_fc"])
    else:
        h = jax.nn.gelu(h + params["b_fc"].astype(h.dtype), approximate=True)
    return h @ params["w_proj"]


def run_mlp(cfg: MlpConfig, key, iters: int | None, reps: int, timing: str = "wall") -> dict:
    """Forward + backward (grads of params and x) of the MLP block, jm vs XLA, same bf16 numerics."""
    d, bf16 = cfg.width, jnp.bfloat16
    k = jax.random.split(key, 4)
    params = {"w_fc": (jax.random.normal(k[0], (d, 4 * d)) / d ** 0.5).astype(bf16),
              "b_fc": 0.1 * jax.random.normal(k[1], (4 * d,)),
              "w_proj": (jax.random.normal(k[2], (4 * d, d)) / (4 * d) ** 0.5).astype(bf16)}
    x = jax.random.normal(k[3], (cfg.tokens, d)).astype(bf16)

    out = _fwd_bwd_vs_xla(mlp, params, x, cfg, f"MLP block {cfg}", iters, reps, timing)
    flops = 3 * 2 * 2 * cfg.tokens * d * 4 * d  # two matmuls, forward + two backward products each
    out.update(matmul_tflops_jm=flops / out["jm_ms"] / 1e9, matmul_tflops_xla=flops / out["xla_ms"] / 1e9)
    return out
