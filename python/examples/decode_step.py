"""decode_step: one decode step of an attention layer's KV cache, run from
Python through the sparkrt package (over libsparkrt_c) as an inference engine
runs it for every token:

  fill_slots_from_block_table  the cache slots of each sequence's context
  reshape_and_cache            the context's keys and values into the caches
  fill_slots_from_block_table  the slot of each sequence's new token
  reshape_and_cache            the new tokens' keys and values
  paged_decode_attn            each new token's query over its sequence

Three sequences (1, 37 and 100 tokens after the step), 8 query heads over 2
KV heads (GQA), head_dim 64, bf16 caches in blocks of 16 tokens placed in a
shuffled pool, so the block table is not the identity.

On a backend that computes (cpu, cuda, vulkan) the slots the device wrote,
the caches (bit for bit) and the attention output are checked against a
numpy float64 reference. The mock computes nothing: there the launches it
recorded must be the step's, in order, and the output must keep its poison.
On every backend two deliberately wrong launches must be refused with the
runtime's exact messages.

From the build tree (repository root):
    SPARKRT_BACKEND=cpu SPARKRT_C_LIBRARY=build/lib/libsparkrt_c.so.0 PYTHONPATH=python \
        python3 python/examples/decode_step.py
From an install (cmake --install build --prefix <prefix>):
    SPARKRT_BACKEND=cpu PYTHONPATH=<prefix>/share/sparkrt/python \
        python3 python/examples/decode_step.py

The inputs are random; the seed is printed and SPARKRT_EXAMPLE_SEED=<seed>
replays it (examples/c_decode and examples/rust_decode draw the same inputs
from the same seed). Exit code 0 when every check passes, 1 otherwise (the
reason on stderr).
"""
import math
import os
import secrets
import sys

import numpy as np

import sparkrt
from sparkrt import ops
from sparkrt.testing import mock_launch_count, mock_launches

SEQ_LENS = (1, 37, 100)  # after the step
Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 8, 2, 64, 16
SPARE_BLOCKS = 5  # pool blocks no sequence owns
ROW = KV_HEADS * HEAD_DIM
# One token's fused q, k, v row, as a QKV projection writes it.
QKV_STRIDE = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
INV_SQRT_D = float(np.float32(1.0 / math.sqrt(HEAD_DIM)))  # the op takes a float

MASK64 = 2**64 - 1


class SplitMix64:
    """splitmix64, the C example's generator: a seed draws the same inputs
    in every language."""

    GAMMA = 0x9E3779B97F4A7C15

    def __init__(self, seed):
        self.state = seed & MASK64

    @staticmethod
    def _mix(z):
        """The output function on uint64 numpy arrays (which wrap)."""
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def next_u64(self, n):
        """The next `n` draws: the state advances by GAMMA before each."""
        steps = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(self.GAMMA)
        z = self._mix(steps + np.uint64(self.state))
        self.state = (self.state + n * self.GAMMA) & MASK64
        return z

    def uniform(self, lo, hi, n):
        return lo + (hi - lo) * ((self.next_u64(n) >> np.uint64(11)).astype(np.float64)
                                 * 2.0**-53)

    def bf16(self, lo, hi, n):
        """Uniform values rounded to float32, then to bf16 (as the C example)."""
        return sparkrt.bf16_from_f32(self.uniform(lo, hi, n).astype(np.float32))


class Checks:
    def __init__(self):
        self.failures = 0

    def fail(self, what):
        print(f"decode_step: check failed: {what}", file=sys.stderr)
        self.failures += 1


def make_inputs(rng):
    """The block table and the bf16 keys, values and queries of the step."""
    blocks_of = [(n + BLOCK_SIZE - 1) // BLOCK_SIZE for n in SEQ_LENS]
    used_blocks = sum(blocks_of)
    pool_blocks = used_blocks + SPARE_BLOCKS
    max_blocks = max(blocks_of)

    # The pool's blocks in a random order (Fisher-Yates), never the identity.
    perm = list(range(pool_blocks))
    for i in range(pool_blocks - 1, 0, -1):
        j = int(rng.next_u64(1)[0]) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    if perm[:used_blocks] == list(range(used_blocks)):
        perm[0], perm[1] = 1, 0
    # Rows padded with -1 past each sequence's blocks, as engines leave them.
    table = np.full((len(SEQ_LENS), max_blocks), -1, np.int32)
    taken = 0
    for s, nb in enumerate(blocks_of):
        table[s, :nb] = perm[taken:taken + nb]
        taken += nb

    keys, values = [], []  # [len][ROW] per sequence, the new token last
    for n in SEQ_LENS:
        kv = rng.bf16(-1.0, 1.0, n * 2 * ROW).reshape(n, 2, ROW)  # per token: key, then value
        keys.append(kv[:, 0].copy())
        values.append(kv[:, 1].copy())
    qkv = np.empty((len(SEQ_LENS), QKV_STRIDE), np.uint16)
    for s, n in enumerate(SEQ_LENS):
        q_end = Q_HEADS * HEAD_DIM
        qkv[s, :q_end] = rng.bf16(-2.0, 2.0, q_end)
        qkv[s, q_end:q_end + ROW] = keys[s][n - 1]
        qkv[s, q_end + ROW:] = values[s][n - 1]
    return table, pool_blocks, keys, values, qkv


def expected_slots(table, s, positions):
    positions = np.asarray(positions, np.int64)
    return table[s, positions // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE + \
        positions % BLOCK_SIZE


def run_step(dev, table, pool_blocks, keys, values, qkv):
    """Issues the step; returns the device arrays to read back."""
    num_seqs = len(SEQ_LENS)
    max_blocks = table.shape[1]
    ctx_lens = [n - 1 for n in SEQ_LENS]
    ctx_first = [sum(ctx_lens[:s]) for s in range(num_seqs)]
    ctx_tokens = sum(ctx_lens)

    cache_shape = (pool_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    # Zeroed caches: a token read from outside its sequence shifts the softmax.
    k_cache = dev.zeros(cache_shape, np.uint16)
    v_cache = dev.zeros(cache_shape, np.uint16)
    d_table = dev.from_numpy(table)
    d_lens = dev.from_numpy(np.array(SEQ_LENS, np.int32))
    d_ctx_key = dev.from_numpy(np.concatenate([k[:-1] for k in keys]))
    d_ctx_value = dev.from_numpy(np.concatenate([v[:-1] for v in values]))
    d_qkv = dev.from_numpy(qkv)
    # Poison: 0xFFFF is a bf16 NaN, an all-ones slot is -1 (skip the token).
    d_ctx_slots = dev.empty(ctx_tokens, np.int64)
    d_step_slots = dev.empty(num_seqs, np.int64)
    d_out = dev.empty((num_seqs, Q_HEADS, HEAD_DIM), np.uint16)
    for a in (d_ctx_slots, d_step_slots, d_out):
        dev.memset(a, 0xFF)
    # Split-KV's workspace: zeroed once, then good for every step.
    ws_bytes = ops.paged_decode_workspace_bytes(num_seqs, Q_HEADS, HEAD_DIM)
    ws = ops.decode_workspace(dev, num_seqs, Q_HEADS, HEAD_DIM) if ws_bytes else None

    # The context (every token but the last of each sequence).
    for s in range(num_seqs):
        ops.fill_slots_from_block_table(
            dev, slots=d_ctx_slots.ptr + 8 * ctx_first[s],
            block_table=d_table.ptr + 4 * max_blocks * s, start_pos=0, count=ctx_lens[s],
            block_size=BLOCK_SIZE)
    ops.reshape_and_cache(
        dev, key=d_ctx_key, value=d_ctx_value, k_cache=k_cache, v_cache=v_cache,
        slot_mapping=d_ctx_slots, num_tokens=ctx_tokens, num_kv_heads=KV_HEADS,
        head_dim=HEAD_DIM, block_size=BLOCK_SIZE, key_stride=ROW, value_stride=ROW)

    # The step: each sequence's new token, its k and v read from the fused row.
    for s in range(num_seqs):
        ops.fill_slots_from_block_table(
            dev, slots=d_step_slots.ptr + 8 * s, block_table=d_table.ptr + 4 * max_blocks * s,
            start_pos=ctx_lens[s], count=1, block_size=BLOCK_SIZE)
    ops.reshape_and_cache(
        dev, key=d_qkv.ptr + 2 * Q_HEADS * HEAD_DIM,
        value=d_qkv.ptr + 2 * (Q_HEADS + KV_HEADS) * HEAD_DIM, k_cache=k_cache,
        v_cache=v_cache, slot_mapping=d_step_slots, num_tokens=num_seqs,
        num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_size=BLOCK_SIZE,
        key_stride=QKV_STRIDE, value_stride=QKV_STRIDE)
    ops.paged_decode_attn(
        dev, cache_format=ops.CacheFormat.BF16, q=d_qkv, k_cache=k_cache, v_cache=v_cache,
        out=d_out, block_tables=d_table, seq_lens=d_lens, max_blocks_per_seq=max_blocks,
        num_seqs=num_seqs, num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
        block_size=BLOCK_SIZE, inv_sqrt_d=INV_SQRT_D, k_scale=0.0, v_scale=0.0,
        q_stride=QKV_STRIDE, cache_stride=0, sliding_window=0, max_seq_len=max(SEQ_LENS),
        workspace=ws, workspace_bytes=ws_bytes, num_splits=0)
    dev.synchronize()
    return dict(out=d_out, ctx_slots=d_ctx_slots, step_slots=d_step_slots, k_cache=k_cache,
                v_cache=v_cache)


def check_mock(dev, out, checks):
    """Recorded, not computed: the step's launches in order, the poison intact."""
    launches = mock_launches(dev)
    print("mock: recorded, not computed; the launches of the step:")
    names = []
    for i, l in enumerate(launches):
        names.append(f"{l.module}.{l.entry}")
        print(f"  {i + 1}. {names[-1]:<45} grid {l.grid} block {l.block}")
    fill = "kv_cache.fill_slots_from_block_table"
    write = "kv_cache.reshape_and_cache"
    # A fill of no tokens (the context of a 1-token sequence) launches nothing.
    expected = [fill for n in SEQ_LENS if n > 1] + [write] + [fill] * len(SEQ_LENS) + [write]
    # The op decides on one pass or split-KV; each is a whole launch sequence.
    decodes = (["paged_attention.paged_decode_attn_bf16"],
               ["paged_attention.paged_decode_attn_bf16_split",
                "paged_attention.paged_decode_attn_combine"],
               ["paged_attention.paged_decode_attn_bf16_split_merge"])
    if not any(names == expected + d for d in decodes):
        print("decode_step: expected, in order: " + " ".join(expected) +
              " and then paged_decode_attn_bf16, or _bf16_split + _combine, or "
              "_bf16_split_merge", file=sys.stderr)
        checks.fail("the mock did not record the step's launches")
    got = out.to_numpy()
    poisoned = int(np.count_nonzero(got == 0xFFFF))
    print(f"mock: output still poisoned: {poisoned} of {got.size} values")
    if poisoned != got.size:
        checks.fail("the mock wrote the attention output")


def check_computed(arrays, table, pool_blocks, keys, values, qkv, checks):
    """Slots against the block table, caches bit for bit, attention against
    float64."""
    ctx_slots = arrays["ctx_slots"].to_numpy()
    step_slots = arrays["step_slots"].to_numpy()
    slot_errors = 0
    first = 0
    for s, n in enumerate(SEQ_LENS):
        want = expected_slots(table, s, range(n))
        got = np.concatenate((ctx_slots[first:first + n - 1], step_slots[s:s + 1]))
        first += n - 1
        for pos in np.flatnonzero(got != want):
            if slot_errors < 5:
                print(f"decode_step: sequence {s} token {pos}: slot {got[pos]}, expected "
                      f"{want[pos]}", file=sys.stderr)
            slot_errors += 1
    print(f"slot mapping: {sum(SEQ_LENS)} slots, {slot_errors} wrong")
    if slot_errors:
        checks.fail("fill_slots_from_block_table wrote wrong slots")
    else:
        # Each token's rows in its slot bit for bit, zeros everywhere else.
        cache_errors = 0
        written = np.zeros(pool_blocks * BLOCK_SIZE, bool)
        for name, src in (("k_cache", keys), ("v_cache", values)):
            flat = arrays[name].to_numpy().reshape(-1, ROW)
            for s, n in enumerate(SEQ_LENS):
                slots = expected_slots(table, s, range(n))
                written[slots] = True
                cache_errors += int(np.count_nonzero(np.any(flat[slots] != src[s], axis=1)))
            cache_errors += int(np.count_nonzero(flat[~written]))
        print(f"caches: {sum(SEQ_LENS)} token rows, {cache_errors} differences")
        if cache_errors:
            checks.fail("reshape_and_cache wrote wrong cache contents")

    # Attention against float64 over the same bf16 inputs. The output is
    # rounded once to bf16 (half an ulp: at most 2^-8 of the value); the
    # absolute term, 2^-8 max |V|, covers the f32 arithmetic (10^-4 max |V|
    # by the contract, docs/kernels.md), the rule of the C example.
    f64 = lambda bits: sparkrt.bf16_to_f32(bits).astype(np.float64)  # noqa: E731
    max_v = max(float(np.abs(f64(v)).max()) for v in values)
    abs_term = 2.0**-8 * max_v
    group = Q_HEADS // KV_HEADS
    q = f64(qkv[:, :Q_HEADS * HEAD_DIM]).reshape(len(SEQ_LENS), Q_HEADS, HEAD_DIM)
    ref = np.empty((len(SEQ_LENS), Q_HEADS, HEAD_DIM))
    for s in range(len(SEQ_LENS)):
        k = f64(keys[s]).reshape(-1, KV_HEADS, HEAD_DIM)
        v = f64(values[s]).reshape(-1, KV_HEADS, HEAD_DIM)
        for h in range(Q_HEADS):
            scores = k[:, h // group] @ q[s, h] * INV_SQRT_D
            p = np.exp(scores - scores.max())
            ref[s, h] = (p @ v[:, h // group]) / p.sum()
    got = f64(arrays["out"].to_numpy())
    err = np.abs(got - ref)
    bound = 2.0**-8 * np.abs(ref) + abs_term
    bad = ~(err <= bound)  # a NaN is bad
    for idx in list(zip(*np.nonzero(bad)))[:5]:
        print(f"decode_step: out{list(map(int, idx))} = {got[idx]:.6g}, expected "
              f"{ref[idx]:.6g} (bound {bound[idx]:.3g})", file=sys.stderr)
    worst = np.unravel_index(np.argmax(err), err.shape)  # the first NaN, if any
    ratio = err / bound
    print(f"attention: max |err| {err[worst]:.3g} (at {ref[worst]:.4g}), bound 2^-8 |ref| + "
          f"2^-8 max |V| ({abs_term:.3g}); largest |err| / bound "
          f"{ratio.flat[np.argmax(ratio)]:.3f}")
    if np.any(bad):
        checks.fail("the attention output is off the float64 reference")


def expect_refused(kernel, args, what, expected, checks):
    """A launch that must fail with INVALID_ARGUMENT and exactly `expected`."""
    try:
        kernel.launch(grid=1, block=64, args=args)
    except sparkrt.Error as e:
        print(f"{what}: {e.code_name}: {e}")
        if e.code == sparkrt.StatusCode.INVALID_ARGUMENT and str(e) == expected:
            return
    else:
        print(f"{what}: OK: (accepted)")
    print(f"decode_step: {what}: expected INVALID_ARGUMENT: {expected}", file=sys.stderr)
    checks.fail("a wrong launch was not refused with the runtime's message")


def seed_from_env():
    text = os.environ.get("SPARKRT_EXAMPLE_SEED", "")
    if not text:
        return secrets.randbits(64)
    if not text.isascii() or not text.isdigit() or int(text) > MASK64:
        raise ValueError(f"SPARKRT_EXAMPLE_SEED='{text}' is not a number")
    return int(text)


def main():
    try:
        seed = seed_from_env()
    except ValueError as e:
        print(f"decode_step: {e}", file=sys.stderr)
        return 1
    print(f"seed {seed} (replay: SPARKRT_EXAMPLE_SEED={seed})")
    print(f"sparkrt {sparkrt.version()}, C API {'.'.join(map(str, sparkrt.c_api_version()))}")

    table, pool_blocks, keys, values, qkv = make_inputs(SplitMix64(seed))
    print(f"decode step: {len(SEQ_LENS)} sequences of {' '.join(map(str, SEQ_LENS))} tokens, "
          f"{Q_HEADS} query heads, {KV_HEADS} KV heads, head_dim {HEAD_DIM}, "
          f"block_size {BLOCK_SIZE}")
    for s, row in enumerate(table):
        print(f"  block table of sequence {s}: {' '.join(map(str, row))}")

    checks = Checks()
    try:
        with sparkrt.Device.open() as dev:  # SPARKRT_BACKEND, else auto
            p = dev.properties
            mock = p.backend == "mock"
            print(f"device: {p.backend} {p.index}: {p.name} ({p.plugin_path})")
            arrays = run_step(dev, table, pool_blocks, keys, values, qkv)
            if mock:
                check_mock(dev, arrays["out"], checks)
                launches_after_step = mock_launch_count(dev)
            else:
                check_computed(arrays, table, pool_blocks, keys, values, qkv, checks)

            # Launches the runtime must refuse before anything reaches the device.
            vadd = dev.kernel("vector_ops", "vector_add_f32")
            out = arrays["out"]
            expect_refused(vadd, [out, out, out, sparkrt.f32(4.0)],
                           "launch with a float for a .u32",
                           "vector_add_f32: parameter #3 is .u32, given f32 (float, for "
                           "'vector_add_f32_param_3'); pass a uint32_t or int32_t", checks)
            expect_refused(vadd, [out, out, out], "launch with an argument missing",
                           "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)",
                           checks)
            if mock and mock_launch_count(dev) != launches_after_step:
                checks.fail("a refused launch reached the mock")
    except sparkrt.Error as e:
        print(f"decode_step: failed: {e.code_name}: {e}", file=sys.stderr)
        checks.failures += 1

    if checks.failures:
        plural = "" if checks.failures == 1 else "s"
        print(f"decode_step: FAILED ({checks.failures} problem{plural}; seed {seed})",
              file=sys.stderr)
        return 1
    print("check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
