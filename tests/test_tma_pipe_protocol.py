"""A model of the synchronization of softmax_fwd_tma_pipe_kernel (cpp/softmax_fwd_tma_pipe.cuh), checked
under random interleavings on the CPU: the GPU kernel itself has no CPU test, and a protocol error there
(a stage refilled while read, a slot rewritten before the cluster has read it, a CTA exiting while
another reads its shared memory, a wait on an arrive that comes later) shows only as a rare wrong row,
a hang or a trap on the GPU.

One cluster of k CTAs of T threads (W of them warp leaders) walks n rows. Each thread is a generator
that mirrors the kernel's per-thread sequence (prologue, loop, final cluster barrier) and yields after
every shared access; the scheduler runs a random runnable thread or completes a random bulk copy in
flight. Shared state: per CTA the 3 stages (the row held, or FLUX while a copy is in flight), their
mbarriers (completed phases; waits by the thread's own parity bit), the 2 cluster slots and the 2 block
partial buffers; the split cluster barrier (arrive, then wait for every thread's arrive of that phase)
and __syncthreads. A read must see exactly the row it expects. Keep this model in step with the kernel.
"""

import random

import pytest

S = 3  # kTmaPipeStages


class ProtocolError(Exception):
    pass


def simulate(k, T, W, n, seed, refill_before_barrier=False, one_slot=False, final_barrier=True):
    rnd = random.Random(seed)
    stage = [[None] * S for _ in range(k)]
    phase = [[0] * S for _ in range(k)]
    pending = [[False] * S for _ in range(k)]
    inflight = []
    slot = [[None, None] for _ in range(k)]
    partial = [[[None] * W for _ in range(2)] for _ in range(k)]
    alive = [True] * k
    arrivals = {}
    bar_gen, bar_count = [0] * k, [0] * k

    def issue(c, row, st):
        if pending[c][st]:
            raise ProtocolError(f"cta {c}: copy into stage {st} while one is in flight")
        pending[c][st] = True
        stage[c][st] = "FLUX"
        inflight.append((c, st, row))

    def thread(c, t):
        phases, cluster_phase = 0, 0

        def mbar_wait(st):
            nonlocal phases
            while (phase[c][st] & 1) == ((phases >> st) & 1):
                yield "blocked"
            phases ^= 1 << st

        def syncthreads():
            gen = bar_gen[c]
            bar_count[c] += 1
            if bar_count[c] == T:
                bar_count[c], bar_gen[c] = 0, gen + 1
            while bar_gen[c] == gen:
                yield "blocked"

        def cluster_arrive():
            nonlocal cluster_phase
            arrivals[cluster_phase] = arrivals.get(cluster_phase, 0) + 1
            cluster_phase += 1
            yield

        def cluster_wait():
            while arrivals.get(cluster_phase - 1, 0) < k * T:
                yield "blocked"

        def read_stage(st, row):
            if stage[c][st] != row:
                raise ProtocolError(f"cta {c} thread {t}: stage {st} holds {stage[c][st]}, not row {row}")

        def block_reduce(row, parity):
            if t < W:
                partial[c][parity][t] = row
            yield
            yield from syncthreads()
            for w in range(W):
                if partial[c][parity][w] != row:
                    raise ProtocolError(f"cta {c} thread {t}: partial[{parity}][{w}] of row {partial[c][parity][w]}")
                yield

        def slot_index(parity):
            return 0 if one_slot else parity

        if t == 0:
            for st in range(min(S, n)):
                issue(c, st, st)
            yield
        yield from syncthreads()
        if n > 0:
            yield from mbar_wait(0)
            read_stage(0, 0)
            yield
            yield from block_reduce(0, 0)
            if t == 0:
                slot[c][0] = 0
            yield
            yield from cluster_arrive()
        st, parity = 0, 0
        for row in range(n):
            has_next = row + 1 < n
            st_next = (st + 1) % S
            if has_next:
                yield from mbar_wait(st_next)
                read_stage(st_next, row + 1)
                yield
            yield from cluster_wait()
            for d in range(k):  # cluster_gather: DSMEM reads of every CTA's slot
                if not alive[d]:
                    raise ProtocolError(f"cta {c} thread {t}: DSMEM read of exited cta {d}")
                if slot[d][slot_index(parity)] != row:
                    raise ProtocolError(f"cta {c} thread {t}: cta {d}'s slot holds row {slot[d][slot_index(parity)]}, not {row}")
                yield
            for _ in range(2):  # the output pass reads the stage over time
                read_stage(st, row)
                yield
            if has_next:
                refill = row + S < n
                if refill_before_barrier and t == 0 and refill:
                    issue(c, row + S, st)
                yield from block_reduce(row + 1, parity ^ 1)
                if t == 0:
                    if refill and not refill_before_barrier:
                        issue(c, row + S, st)
                    yield
                    slot[c][slot_index(parity ^ 1)] = row + 1
                    yield
                yield from cluster_arrive()
            st, parity = st_next, parity ^ 1
        if final_barrier:
            yield from cluster_arrive()
            yield from cluster_wait()

    threads = {(c, t): thread(c, t) for c in range(k) for t in range(T)}
    finished = [0] * k
    for _ in range(10**6):
        if not threads and not inflight:
            break
        if inflight and (not threads or rnd.random() < 0.3):
            c, st, row = inflight.pop(rnd.randrange(len(inflight)))
            stage[c][st], pending[c][st] = row, False
            phase[c][st] += 1
            continue
        keys = list(threads)
        rnd.shuffle(keys)
        for key in keys:
            try:
                if next(threads[key]) != "blocked":
                    break
            except StopIteration:
                del threads[key]
                finished[key[0]] += 1
                alive[key[0]] = finished[key[0]] < T
                break
        else:
            if not inflight:
                raise ProtocolError(f"deadlock: threads {sorted(threads)} blocked, no copy in flight")
    else:
        raise ProtocolError("no end after 10^6 steps")
    if any(any(p) for p in pending):
        raise ProtocolError("a bulk copy still in flight at exit")


CASES = [(k, T, n) for k in (1, 2, 3, 5) for T in (2, 4) for n in (0, 1, 2, 3, 4, 5, 7, 9)]


@pytest.mark.parametrize("k,T,n", CASES)
def test_pipe_protocol(k, T, n):
    for seed in range(20):
        simulate(k, T, min(T, 2), n, seed)


# The model finds each classic mistake: the refill issued before the block barrier that ends the output
# pass, one cluster slot instead of two, no final cluster barrier.
@pytest.mark.parametrize("mistake", ["refill_before_barrier", "one_slot", "no_final_barrier"])
def test_pipe_protocol_model_catches(mistake):
    kwargs = {"final_barrier": False} if mistake == "no_final_barrier" else {mistake: True}
    with pytest.raises(ProtocolError):
        for seed in range(200):
            simulate(3, 4, 2, 7, seed, **kwargs)
