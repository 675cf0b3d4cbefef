"""A small character-level GPT-2-style decoder in Flax NNX that trains on jax_memops' kernels or on plain Flax.

    python examples/gpt.py --tiny --steps 200 --ops jm --out out/     # CPU-sized; --ops flax for plain Flax
    python examples/gpt.py --steps 2000 --compare --out out/          # GPU-sized; both modes, same init/data

`--ops jm` swaps three things and nothing else, so both modes have identical parameter trees:
LayerNorm -> jm.nnx.LayerNorm, the attention softmax -> jm.softmax (attention_fn=jm.nnx.dot_product_attention),
and the MLP's bias + GELU -> jm.scale_bias_gelu (the first MLP Linear has no bias of its own; its bias is a
separate parameter added before the GELU in both modes). Writes, in --out, `loss_<ops>.csv` (step, loss,
seconds) and `result_<ops>.json`; --compare also writes `compare.json` (largest loss-curve difference,
median step times of both).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jax_memops as jm

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "river.txt")


@dataclasses.dataclass(frozen=True)
class Config:
    block: int = 256         # context length
    layers: int = 6
    heads: int = 6
    width: int = 384
    batch: int = 64
    lr: float = 1e-3
    dtype: str = "bfloat16"  # activations; parameters and optimizer state are float32


GPU = Config()
TINY = Config(block=32, layers=2, heads=2, width=64, batch=16, lr=3e-3, dtype="float32")


class Block(nnx.Module):
    def __init__(self, cfg: Config, ops: str, *, rngs: nnx.Rngs):
        dt, d = jnp.dtype(cfg.dtype), cfg.width
        norm = jm.nnx.LayerNorm if ops == "jm" else nnx.LayerNorm
        attention = jm.nnx.dot_product_attention if ops == "jm" else nnx.dot_product_attention
        self.ops = ops
        # epsilon 1e-5 as in GPT-2; dtype=dt makes the norms take and return activations in dt.
        self.ln1 = norm(d, epsilon=1e-5, dtype=dt, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(cfg.heads, d, dtype=dt, decode=False, attention_fn=attention,
                                           keep_rngs=False, rngs=rngs)
        self.ln2 = norm(d, epsilon=1e-5, dtype=dt, rngs=rngs)
        self.fc = nnx.Linear(d, 4 * d, use_bias=False, dtype=dt, rngs=rngs)
        self.fc_bias = nnx.Param(jnp.zeros((4 * d,), jnp.float32))
        self.proj = nnx.Linear(4 * d, d, dtype=dt, rngs=rngs)

    def __call__(self, x, causal_mask):
        x = x + self.attn(self.ln1(x), mask=causal_mask)
        h = self.fc(self.ln2(x))
        if self.ops == "jm":
            h = jm.scale_bias_gelu(h, 1.0, self.fc_bias[...])
        else:  # what nnx.Linear with a bias followed by nnx.gelu computes
            h = nnx.gelu(h + self.fc_bias[...].astype(h.dtype), approximate=True)
        return x + self.proj(h)


class GPT(nnx.Module):
    def __init__(self, cfg: Config, vocab: int, ops: str, *, rngs: nnx.Rngs):
        dt = jnp.dtype(cfg.dtype)
        self.tokens = nnx.Embed(vocab, cfg.width, dtype=dt, rngs=rngs)
        self.positions = nnx.Embed(cfg.block, cfg.width, dtype=dt, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, ops, rngs=rngs) for _ in range(cfg.layers)])
        self.ln_f = (jm.nnx.LayerNorm if ops == "jm" else nnx.LayerNorm)(cfg.width, epsilon=1e-5, dtype=dt,
                                                                          rngs=rngs)
        self.head = nnx.Linear(cfg.width, vocab, use_bias=False, dtype=dt, rngs=rngs)

    def __call__(self, idx):
        x = self.tokens(idx) + self.positions(jnp.arange(idx.shape[-1]))
        # A mask rather than MultiHeadAttention's is_causal, which older Flax (< 0.12.8) lacks.
        causal_mask = nnx.make_causal_mask(idx[:1], dtype=bool)
        for block in self.blocks:
            x = block(x, causal_mask)
        return self.head(self.ln_f(x)).astype(jnp.float32)


def load_text(path=DATA):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    return np.array([chars.index(c) for c in text], np.int32), len(chars)


def batches(data, cfg: Config, seed: int):
    """Random windows of the text, the same sequence for a given seed: (batch, block) inputs and targets."""
    rng = np.random.default_rng(seed)
    while True:
        windows = rng.integers(0, len(data) - cfg.block - 1, (cfg.batch, 1)) + np.arange(cfg.block + 1)
        yield data[windows[:, :-1]], data[windows[:, 1:]]


def train(cfg: Config, ops: str, steps: int, seed: int = 0, state=None, log_every: int = 0, data=None):
    """Trains from the init of `seed` (or from `state`, an nnx.State of a GPT of this config).

    Returns {"loss": [...], "seconds": [...] per step, "state": the final nnx.State, ...}."""
    data, vocab = load_text() if data is None else data
    model = GPT(cfg, vocab, ops, rngs=nnx.Rngs(seed))
    if state is not None:
        nnx.update(model, state)  # the other mode's checkpoint: the trees are identical
    graphdef, params = nnx.split(model)
    # Linear warmup (Adam's first steps are large) then cosine decay to lr / 10.
    lr = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, max(1, min(100, steps // 10)), max(steps, 2),
                                            cfg.lr / 10)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, b1=0.9, b2=0.95, weight_decay=0.1))

    @jax.jit
    def step(params, opt_state, x, y):
        def loss_fn(params):
            logits = nnx.merge(graphdef, params)(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state, losses, seconds = tx.init(params), [], []
    for i, (x, y) in zip(range(steps), batches(data, cfg, seed)):
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(float(loss))  # waits for the step
        seconds.append(time.perf_counter() - t0)
        if log_every and (i % log_every == 0 or i == steps - 1):
            print(f"[{ops}] step {i:5d}  loss {losses[-1]:.4f}  {seconds[-1] * 1e3:8.2f} ms", flush=True)
    timed = seconds[1:] or seconds  # step 0 includes compilation
    return {"ops": ops, "config": dataclasses.asdict(cfg), "steps": steps, "seed": seed, "loss": losses,
            "seconds": seconds, "compile_s": seconds[0], "median_step_s": statistics.median(timed),
            "device": str(jax.devices()[0]), "versions": _versions(), "state": params}


def _versions():
    import flax

    return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
            "jax_memops": jm.__version__}


def compare(cfg: Config, steps: int, seed: int = 0, log_every: int = 0):
    """Both modes from the same initial parameters and the same batches."""
    data = load_text()
    init = nnx.state(GPT(cfg, data[1], "flax", rngs=nnx.Rngs(seed)))
    runs = {ops: train(cfg, ops, steps, seed, state=init, log_every=log_every, data=data)
            for ops in ("flax", "jm")}
    diff = np.abs(np.subtract(runs["jm"]["loss"], runs["flax"]["loss"]))
    summary = {"steps": steps, "config": dataclasses.asdict(cfg), "max_loss_diff": float(diff.max()),
               "max_loss_diff_step": int(diff.argmax()),
               "loss_start": {k: r["loss"][0] for k, r in runs.items()},
               "loss_end": {k: r["loss"][-1] for k, r in runs.items()},
               "median_step_s": {k: r["median_step_s"] for k, r in runs.items()},
               "compile_s": {k: r["compile_s"] for k, r in runs.items()},
               "speedup_jm": runs["flax"]["median_step_s"] / runs["jm"]["median_step_s"]}
    return runs, summary


def write(out, run):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"loss_{run['ops']}.csv"), "w") as f:
        f.write("step,loss,seconds\n")
        f.writelines(f"{i},{l:.6f},{s:.6f}\n" for i, (l, s) in enumerate(zip(run["loss"], run["seconds"])))
    with open(os.path.join(out, f"result_{run['ops']}.json"), "w") as f:
        json.dump({k: v for k, v in run.items() if k != "state"}, f, indent=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", choices=("jm", "flax"), default="jm")
    p.add_argument("--compare", action="store_true", help="train both modes from the same init and data")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--tiny", action="store_true", help="the CPU-sized config (default: GPU-sized)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), help="activation dtype (overrides the config)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--out", default="gpt-out")
    a = p.parse_args(argv)
    cfg = TINY if a.tiny else GPU
    cfg = dataclasses.replace(cfg, dtype=a.dtype) if a.dtype else cfg
    print(f"{cfg} on {jax.devices()[0]}; {_versions()}")
    if not a.compare:
        run = train(cfg, a.ops, a.steps, a.seed, log_every=a.log_every)
        write(a.out, run)
        print(f"[{a.ops}] loss {run['loss'][0]:.4f} -> {run['loss'][-1]:.4f}; median step "
              f"{run['median_step_s'] * 1e3:.2f} ms (compile {run['compile_s']:.1f} s)")
        return
    runs, summary = compare(cfg, a.steps, a.seed, a.log_every)
    for run in runs.values():
        write(a.out, run)
    with open(os.path.join(a.out, "compare.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
