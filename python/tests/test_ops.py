"""One decode step through the ops: slot mapping from block tables, the
paged bf16 cache write and paged decode attention (GQA, ragged sequence
lengths), against a float64 numpy reference on cpu and against the expected
launch sequence on the mock."""
import math

import numpy as np
import pytest

import sparkrt
from sparkrt import ops
from sparkrt.testing import MockLaunch, mock_launches, mock_reset

NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 8, 2, 64, 16
HEADS_PER_CTA = 4  # the largest divisor of the GQA group (4) up to 8


class Step:
    """Random inputs of one decode step and their device copies."""

    def __init__(self, dev, rng, num_seqs=3, max_len=100):
        self.lens = [int(x) for x in rng.integers(1, max_len + 1, size=num_seqs)]
        self.lens[0] = 1  # a sequence of just its new token
        self.num_seqs = num_seqs
        self.max_blocks = math.ceil(max_len / BLOCK_SIZE)
        blocks_used = sum(math.ceil(n / BLOCK_SIZE) for n in self.lens)
        self.num_blocks = blocks_used + 3
        # Every sequence's blocks scattered over the pool; unused entries -1.
        physical = rng.permutation(self.num_blocks)
        self.tables = np.full((num_seqs, self.max_blocks), -1, np.int32)
        used = 0
        for s, n in enumerate(self.lens):
            nb = math.ceil(n / BLOCK_SIZE)
            self.tables[s, :nb] = physical[used:used + nb]
            used += nb
        self.num_tokens = sum(self.lens)
        row = NUM_KV_HEADS * HEAD_DIM
        self.kv_stride = row + 8  # rows with a gap, as a fused QKV buffer has
        self.q_stride = NUM_Q_HEADS * HEAD_DIM + 16
        # Values away from zero, rounded to bf16 once: the reference uses the
        # same numbers the kernels read.
        self.key = sparkrt.bf16_from_f32(rng.standard_normal((self.num_tokens, self.kv_stride)))
        self.value = sparkrt.bf16_from_f32(rng.standard_normal((self.num_tokens, self.kv_stride)))
        self.q = sparkrt.bf16_from_f32(rng.standard_normal((num_seqs, self.q_stride)))
        self.inv_sqrt_d = np.float32(1.0 / math.sqrt(HEAD_DIM))

        self.d_key = dev.from_numpy(self.key)
        self.d_value = dev.from_numpy(self.value)
        self.d_q = dev.from_numpy(self.q)
        self.d_tables = dev.from_numpy(self.tables)
        self.d_lens = dev.from_numpy(np.array(self.lens, np.int32))
        cache_shape = (self.num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
        poison = np.full(cache_shape, 0x7FC1, np.uint16)  # a NaN no write produces
        self.k_cache = dev.from_numpy(poison)
        self.v_cache = dev.from_numpy(poison)
        self.slots = dev.from_numpy(np.full(self.num_tokens, -7, np.int64))
        self.out = dev.from_numpy(np.full((num_seqs, NUM_Q_HEADS, HEAD_DIM), 0x7FC1, np.uint16))

    def expected_slots(self):
        out = []
        for s, n in enumerate(self.lens):
            for t in range(n):
                out.append(int(self.tables[s, t // BLOCK_SIZE]) * BLOCK_SIZE + t % BLOCK_SIZE)
        return np.array(out, np.int64)

    def write_cache(self, dev, stream=None):
        first = 0
        for s, n in enumerate(self.lens):
            ops.fill_slots_from_block_table(
                dev, slots=self.slots.ptr + 8 * first, block_table=self.d_tables.ptr +
                4 * self.max_blocks * s, start_pos=0, count=n, block_size=BLOCK_SIZE,
                stream=stream)
            first += n
        ops.reshape_and_cache(
            dev, key=self.d_key, value=self.d_value, k_cache=self.k_cache, v_cache=self.v_cache,
            slot_mapping=self.slots, num_tokens=self.num_tokens, num_kv_heads=NUM_KV_HEADS,
            head_dim=HEAD_DIM, block_size=BLOCK_SIZE, key_stride=self.kv_stride,
            value_stride=self.kv_stride, stream=stream)

    def attend(self, dev, workspace=None, num_splits=0, stream=None):
        ops.paged_decode_attn(
            dev, cache_format=ops.CacheFormat.BF16, q=self.d_q, k_cache=self.k_cache,
            v_cache=self.v_cache, out=self.out, block_tables=self.d_tables,
            seq_lens=self.d_lens, max_blocks_per_seq=self.max_blocks, num_seqs=self.num_seqs,
            num_q_heads=NUM_Q_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
            block_size=BLOCK_SIZE, inv_sqrt_d=self.inv_sqrt_d, k_scale=1.0, v_scale=1.0,
            q_stride=self.q_stride, cache_stride=0, sliding_window=0, max_seq_len=0,
            workspace=workspace, workspace_bytes=workspace.nbytes if workspace else 0,
            num_splits=num_splits, stream=stream)

    def reference(self):
        """float64 GQA attention over the bf16 inputs."""
        row = NUM_KV_HEADS * HEAD_DIM
        k = sparkrt.bf16_to_f32(self.key[:, :row]).astype(np.float64)
        v = sparkrt.bf16_to_f32(self.value[:, :row]).astype(np.float64)
        k = k.reshape(-1, NUM_KV_HEADS, HEAD_DIM)
        v = v.reshape(-1, NUM_KV_HEADS, HEAD_DIM)
        q = sparkrt.bf16_to_f32(self.q[:, :NUM_Q_HEADS * HEAD_DIM]).astype(np.float64)
        q = q.reshape(self.num_seqs, NUM_Q_HEADS, HEAD_DIM)
        group = NUM_Q_HEADS // NUM_KV_HEADS
        out = np.empty((self.num_seqs, NUM_Q_HEADS, HEAD_DIM))
        first = 0
        for s, n in enumerate(self.lens):
            for h in range(NUM_Q_HEADS):
                kv = h // group
                scores = k[first:first + n, kv] @ q[s, h] * float(self.inv_sqrt_d)
                p = np.exp(scores - scores.max())
                out[s, h] = (p / p.sum()) @ v[first:first + n, kv]
            first += n
        return out


def _check_cache(step, seeded):
    slots = step.slots.to_numpy()
    assert np.array_equal(slots, step.expected_slots()), seeded.where
    row = NUM_KV_HEADS * HEAD_DIM
    for name, cache, src in (("k", step.k_cache, step.key), ("v", step.v_cache, step.value)):
        flat = cache.to_numpy().reshape(-1, row)
        assert np.array_equal(flat[slots], src[:, :row]), f"{name}_cache; {seeded.where}"
        untouched = np.ones(flat.shape[0], bool)
        untouched[slots] = False
        assert np.all(flat[untouched] == 0x7FC1), f"{name}_cache written elsewhere; {seeded.where}"


def _check_attention(step, seeded, what):
    got = sparkrt.bf16_to_f32(step.out.to_numpy()).astype(np.float64)
    want = step.reference()
    # The kernels compute in f32 and round once to bf16 (8 significant bits):
    # at most half an ulp, <= 2^-8 |value| (reached near the bottom of a
    # binade, so this term has no slack); f32 scores, softmax and sums add
    # the rest, measured below 3e-8 of the output's scale: 1e-4 leaves a
    # wide margin.
    bound = 2.0**-8 * np.abs(want) + 1e-4 * np.abs(want).max()
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"{what}: |err| {err[worst]:.3g} > bound {bound[worst]:.3g} "
                                  f"at {worst} (got {got[worst]}, want {want[worst]}); "
                                  f"lens {step.lens}; {seeded.where}")


def _decode_launches(step):
    fills = [MockLaunch("kv_cache", "fill_slots_from_block_table", ((n + 255) // 256, 1, 1),
                        (256, 1, 1)) for n in step.lens]
    return fills + [
        MockLaunch("kv_cache", "reshape_and_cache", (step.num_tokens, 1, 1), (256, 1, 1)),
        MockLaunch("paged_attention", "paged_decode_attn_bf16",
                   (NUM_Q_HEADS // HEADS_PER_CTA, step.num_seqs, 1), (256, 1, 1)),
    ]


def test_decode_step(dev, backend, seeded):
    step = Step(dev, seeded.rng)
    with dev.stream() as s:
        step.write_cache(dev, stream=s)
        step.attend(dev, stream=s)
        s.synchronize()
    if backend == "mock":
        assert mock_launches(dev) == _decode_launches(step), seeded.where
        return
    _check_cache(step, seeded)
    _check_attention(step, seeded, "one pass")


@pytest.mark.parametrize("num_splits", [2, 8])
def test_decode_split_kv(dev, backend, seeded, num_splits):
    step = Step(dev, seeded.rng, num_seqs=4, max_len=300)
    step.write_cache(dev)
    ws = ops.decode_workspace(dev, step.num_seqs, NUM_Q_HEADS, HEAD_DIM)
    assert ws.nbytes == ops.paged_decode_workspace_bytes(step.num_seqs, NUM_Q_HEADS, HEAD_DIM)
    mock_start = len(mock_launches(dev)) if backend == "mock" else 0
    step.attend(dev, workspace=ws, num_splits=num_splits)
    dev.synchronize()
    if backend == "mock":
        entries = [r.entry for r in mock_launches(dev)[mock_start:]]
        want = (["paged_decode_attn_bf16_split", "paged_decode_attn_combine"] if num_splits < 8
                else ["paged_decode_attn_bf16_split_merge"])
        assert entries == want
        return
    _check_attention(step, seeded, f"{num_splits} splits")


def test_keywords_are_checked(dev):
    with pytest.raises(TypeError, match=r"fill_slots_from_block_table\(\) missing keyword "
                                        r"argument 'block_size'"):
        ops.fill_slots_from_block_table(dev, slots=0, block_table=0, start_pos=0, count=1)
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'blocksize'; "
                                        r"missing keyword argument 'block_size'"):
        ops.fill_slots_from_block_table(dev, slots=0, block_table=0, start_pos=0, count=1,
                                        blocksize=16)
    with pytest.raises(TypeError, match="missing keyword arguments 'in_', 'out'"):
        ops.hadamard_transform_bf16(dev, num_tokens=1, num_heads=1, head_dim=64, in_stride=64,
                                    out_stride=64)
    with pytest.raises(OverflowError, match=r"fill_slots_from_block_table: count: -1 is out of "
                                            r"range \[0, 4294967295\]"):
        ops.fill_slots_from_block_table(dev, slots=0, block_table=0, start_pos=0, count=-1,
                                        block_size=16)
    with pytest.raises(TypeError, match="fill_slots_from_block_table: slots"):
        ops.fill_slots_from_block_table(dev, slots="x", block_table=0, start_pos=0, count=1,
                                        block_size=16)


def test_op_checks_are_the_runtimes(dev, backend):
    with pytest.raises(sparkrt.Error) as info:
        ops.fill_slots_from_block_table(dev, slots=0, block_table=0, start_pos=0, count=4,
                                        block_size=0)
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert info.value.message == "fill_slots_from_block_table: block_size must be > 0"
    step = Step(dev, np.random.default_rng(1))
    with pytest.raises(sparkrt.Error) as info:
        ops.paged_decode_attn(
            dev, cache_format=ops.CacheFormat.BF16, q=step.d_q, k_cache=step.k_cache,
            v_cache=step.v_cache, out=step.out, block_tables=step.d_tables, seq_lens=step.d_lens,
            max_blocks_per_seq=step.max_blocks, num_seqs=step.num_seqs, num_q_heads=8,
            num_kv_heads=2, head_dim=60, block_size=BLOCK_SIZE, inv_sqrt_d=0.125, k_scale=1,
            v_scale=1, q_stride=step.q_stride, cache_stride=0, sliding_window=0, max_seq_len=0,
            workspace=None, workspace_bytes=0, num_splits=0)
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert "head_dim 60 must be a multiple of 8" in info.value.message
    if backend == "mock":
        assert mock_launches(dev) == []


def test_empty_work_launches_nothing(dev, backend):
    ops.fill_slots_from_block_table(dev, slots=0, block_table=0, start_pos=0, count=0,
                                    block_size=16)
    if backend == "mock":
        assert mock_launches(dev) == []


def test_sizes_without_a_device():
    layout = ops.turbo_cache_layout(4, 16, 8, 128)
    assert isinstance(layout, ops.TurboCacheLayout)
    assert layout.k_block_stride_bytes == 16 * 8 * 128 * 2  # a raw bf16 K block
    assert 0 < layout.v_data_section_bytes <= layout.v_block_stride_bytes
    with pytest.raises(sparkrt.Error) as info:
        ops.turbo_cache_layout(5, 16, 8, 128)
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    small = ops.paged_decode_workspace_bytes(4, 8, 64, 2)
    assert 0 < small < ops.paged_decode_workspace_bytes(4, 8, 64)


@pytest.mark.backends("mock")
def test_mock_reset(dev):
    step = Step(dev, np.random.default_rng(2))
    step.write_cache(dev)
    assert len(mock_launches(dev)) == step.num_seqs + 1
    mock_reset(dev)
    assert mock_launches(dev) == []


def test_every_other_op_reaches_its_kernels(dev, backend, seeded):
    """The ops the decode step does not use, each once: the kernels and
    geometry on the mock, results where they are easy to state on cpu."""
    rng = seeded.rng
    tokens, heads, dim, bs, blocks = 5, 2, 64, 16, 4
    row = heads * dim
    key_bits = sparkrt.bf16_from_f32(rng.standard_normal((tokens, row)))
    key = dev.from_numpy(key_bits)
    value = dev.from_numpy(sparkrt.bf16_from_f32(rng.standard_normal((tokens, row))))
    slots = dev.from_numpy(rng.choice(blocks * bs, size=tokens, replace=False).astype(np.int64))
    kc = dev.zeros((blocks, bs, heads, dim), np.uint16)
    vc = dev.zeros((blocks, bs, heads, dim), np.uint16)
    k8 = dev.zeros((blocks, bs, heads, dim), np.uint8)
    v8 = dev.zeros((blocks, bs, heads, dim), np.uint8)
    pos = dev.from_numpy(np.arange(tokens, dtype=np.int32))
    weight = dev.from_numpy(sparkrt.bf16_from_f32(rng.uniform(0.5, 1.5, dim)))
    shape = dict(num_tokens=tokens, num_kv_heads=heads, head_dim=dim, block_size=bs)

    ops.reshape_and_cache_flash_v_only(dev, value=value, v_cache=vc, slot_mapping=slots,
                                       value_stride=row, **shape)
    ops.reshape_and_cache_fp8(dev, key=key, value=value, k_cache=k8, v_cache=v8,
                              slot_mapping=slots, k_scale=0.5, v_scale=0.25, key_stride=row,
                              value_stride=row, cache_stride=bs * row, **shape)
    for variant in ops.FusedKVariant:
        ops.fused_k_norm_rope_cache_write(
            dev, variant=variant, k_in=key, k_norm_weight=weight, positions=pos, pos_t=pos,
            pos_h=pos, pos_w=pos, k_cache=k8 if variant == ops.FusedKVariant.FP8 else kc,
            slot_mapping=slots, rotary_dim=dim, rms_eps=1e-6, theta=10000.0, inv_scale=2.0,
            **shape)
    rotated = dev.zeros((tokens, row), np.uint16)
    back = dev.zeros((tokens, row), np.uint16)
    hadamard = dict(num_tokens=tokens, num_heads=heads, head_dim=dim, in_stride=row,
                    out_stride=row)
    ops.hadamard_transform_bf16(dev, in_=key, out=rotated, **hadamard)
    ops.hadamard_transform_bf16(dev, **{"in": rotated}, out=back, **hadamard)
    layout = ops.turbo_cache_layout(4, bs, heads, dim)
    tk = dev.zeros(blocks * layout.k_block_stride_bytes, np.uint8)
    tv = dev.zeros(blocks * layout.v_block_stride_bytes, np.uint8)
    ops.reshape_and_cache_turbo(
        dev, bits=4, key=key, value=rotated, k_cache=tk, v_cache=tv, slot_mapping=slots,
        key_stride=row, value_stride=row, k_block_stride_bytes=layout.k_block_stride_bytes,
        v_block_stride_bytes=layout.v_block_stride_bytes,
        v_data_section_bytes=layout.v_data_section_bytes, **shape)
    q = dev.from_numpy(sparkrt.bf16_from_f32(rng.standard_normal((2, 4 * dim))))
    tables = dev.from_numpy(np.array([[0, 1, 2, 3], [3, 2, 1, 0]], np.int32))
    lens = dev.from_numpy(np.array([20, 64], np.int32))
    out = dev.from_numpy(np.full((2, 4, dim), 0x7FC1, np.uint16))
    ops.paged_decode_attn_turbo(
        dev, bits=4, q=q, k_cache=tk, v_cache=tv, out=out, block_tables=tables, seq_lens=lens,
        max_blocks_per_seq=4, num_seqs=2, num_q_heads=4, num_kv_heads=heads, head_dim=dim,
        block_size=bs, inv_sqrt_d=0.125, q_stride=4 * dim,
        v_block_stride_bytes=layout.v_block_stride_bytes,
        v_data_section_bytes=layout.v_data_section_bytes, sliding_window=0, max_seq_len=0,
        workspace=None, workspace_bytes=0, num_splits=0)
    dev.synchronize()

    if backend == "mock":
        per_token, per_head = (tokens, 1, 1), (tokens, heads, 1)
        assert mock_launches(dev) == [
            MockLaunch("kv_cache", "reshape_and_cache_flash_v_only", per_token, (256, 1, 1)),
            MockLaunch("kv_cache", "reshape_and_cache_fp8", per_token, (256, 1, 1)),
            MockLaunch("kv_cache", "fused_k_norm_rope_cache_write_bf16", per_head, (dim, 1, 1)),
            MockLaunch("kv_cache", "fused_k_norm_rope_cache_write_bf16_mrope", per_head,
                       (dim, 1, 1)),
            MockLaunch("kv_cache", "fused_k_norm_rope_cache_write_fp8", per_head, (dim, 1, 1)),
            MockLaunch("turbo_kv_cache", "hadamard_transform_bf16", per_head, (256, 1, 1)),
            MockLaunch("turbo_kv_cache", "hadamard_transform_bf16", per_head, (256, 1, 1)),
            MockLaunch("turbo_kv_cache", "reshape_and_cache_flash_bf16k_turbo4v", per_token,
                       (256, 1, 1)),
            MockLaunch("turbo_paged_attention", "paged_decode_attn_bf16k_turbo4v", (2, 2, 1),
                       (256, 1, 1)),
        ], seeded.where
        return
    flat = vc.to_numpy().reshape(-1, row)
    assert np.array_equal(flat[slots.to_numpy()], value.to_numpy()), seeded.where
    # H / sqrt(d) is orthonormal and its own inverse: twice gives the input
    # back up to the two bf16 roundings, each at most 2^-8 of the value, the
    # first spread by H over the row (at most 2^-8 of the row's norm).
    x = sparkrt.bf16_to_f32(key_bits).astype(np.float64).reshape(tokens, heads, dim)
    y = sparkrt.bf16_to_f32(back.to_numpy()).astype(np.float64).reshape(tokens, heads, dim)
    norms = np.linalg.norm(x, axis=2, keepdims=True)
    assert np.all(np.abs(y - x) <= 2.0**-8 * (np.abs(x) + norms) * 1.01 + 1e-6), seeded.where
    assert not np.any(out.to_numpy() == 0x7FC1), f"turbo decode left output; {seeded.where}"


@pytest.mark.backends("mock", "cpu")
def test_mla_cache_assemble(dev, backend, seeded):
    """One token's MLA cache rows: K = [latent | rope | zeros], V = [latent | zeros]."""
    kv_lora, rope, dim = 448, 64, 576
    latent = sparkrt.bf16_from_f32(seeded.rng.uniform(0.25, 2.0, kv_lora) *
                                   seeded.rng.choice([-1.0, 1.0], kv_lora))
    k_rope = sparkrt.bf16_from_f32(seeded.rng.uniform(0.25, 2.0, rope) *
                                   seeded.rng.choice([-1.0, 1.0], rope))
    poison = np.full(dim, 0x7FC1, np.uint16)
    k_row, v_row = dev.from_numpy(poison), dev.from_numpy(poison)
    ops.mla_cache_assemble(dev, kv_latent=dev.from_numpy(latent), k_rope=dev.from_numpy(k_rope),
                           k_cache=k_row, v_cache=v_row, kv_lora=kv_lora, rope=rope,
                           mla_cache_dim=dim)
    dev.synchronize()
    if backend == "mock":
        assert mock_launches(dev) == [MockLaunch("mla", "mla_cache_assemble", (1, 1, 1),
                                                 (dim, 1, 1))]
        return
    zeros = np.zeros(dim - kv_lora - rope, np.uint16)
    assert np.array_equal(k_row.to_numpy(), np.concatenate([latent, k_rope, zeros])), seeded.where
    assert np.array_equal(v_row.to_numpy(), np.concatenate(
        [latent, np.zeros(dim - kv_lora, np.uint16)])), seeded.where


@pytest.mark.backends("mock")
def test_mla_paged_decode_on_the_mock(dev):
    """An fp8 MLA decode with enough sequences to take the tiled kernel: one
    CTA per 16 query heads of the KV head and sequence, 320 threads."""
    seqs, heads, dim, block, max_blocks = 12, 32, 576, 64, 2
    stride = block * dim
    pool = dev.zeros(seqs * max_blocks * stride, np.uint8)
    q = dev.zeros((seqs, heads, dim), np.uint16)
    out = dev.zeros((seqs, heads, dim - 64), np.uint16)
    tables = dev.from_numpy(np.arange(seqs * max_blocks, dtype=np.int32).reshape(seqs, -1))
    lens = dev.from_numpy(np.full(seqs, 100, np.int32))
    ops.mla_paged_decode(
        dev, cache_format=ops.CacheFormat.FP8, q=q, k_cache=pool, v_cache=pool, o=out,
        block_tables=tables, seq_lens=lens, max_blocks_per_seq=max_blocks, num_q_heads=heads,
        num_kv_heads=1, q_head_dim=dim, kv_cache_dim=dim, block_size=block,
        inv_sqrt_d=1 / math.sqrt(192), k_scale=0.02, v_scale=0.03, cache_stride=stride,
        block_stride_bytes=0, data_section_bytes=0, num_seqs=seqs, sliding_window=0,
        sinks=None, comp_pool=None, comp_block_count=0, workspace=None, workspace_bytes=0,
        num_splits=0)
    assert mock_launches(dev) == [MockLaunch("mla", "mla_paged_decode_fp8",
                                             (heads // 16, seqs, 1), (320, 1, 1))]
    with pytest.raises(sparkrt.Error) as info:
        ops.mla_paged_decode(
            dev, cache_format=ops.CacheFormat.BF16, q=q, k_cache=pool, v_cache=pool, o=out,
            block_tables=tables, seq_lens=lens, max_blocks_per_seq=max_blocks,
            num_q_heads=heads, num_kv_heads=1, q_head_dim=dim, kv_cache_dim=dim,
            block_size=block, inv_sqrt_d=0.07, k_scale=1, v_scale=1, cache_stride=stride,
            block_stride_bytes=0, data_section_bytes=0, num_seqs=seqs, sliding_window=0,
            sinks=None, comp_pool=None, comp_block_count=0, workspace=None, workspace_bytes=0,
            num_splits=0)
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert "cache_format" in info.value.message
    layout = ops.mla_nvfp4_block_layout(block, 1, dim)
    assert layout.data_section_bytes == block * dim // 2
    assert layout.data_section_bytes + block * dim // 16 <= layout.block_stride_bytes
    assert ops.mla_decode_workspace_bytes(1, 16, dim, 2) < ops.mla_decode_workspace_bytes(1, 16,
                                                                                         dim)
