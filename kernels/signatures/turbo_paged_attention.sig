// The kernel signatures of turbo_paged_attention.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry paged_decode_attn_bf16k_turbo2v(
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_5,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_10,
	.param .f32 paged_decode_attn_bf16k_turbo2v_param_11,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_12,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo2v_param_14,
	.param .u32 paged_decode_attn_bf16k_turbo2v_param_15
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16k_turbo2v_split(
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_5,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_10,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_11,
	.param .f32 paged_decode_attn_bf16k_turbo2v_split_param_12,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_14,
	.param .u64 paged_decode_attn_bf16k_turbo2v_split_param_15,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_16,
	.param .u32 paged_decode_attn_bf16k_turbo2v_split_param_17
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16k_turbo3v(
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_5,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_10,
	.param .f32 paged_decode_attn_bf16k_turbo3v_param_11,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_12,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo3v_param_14,
	.param .u32 paged_decode_attn_bf16k_turbo3v_param_15
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16k_turbo3v_split(
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_5,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_10,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_11,
	.param .f32 paged_decode_attn_bf16k_turbo3v_split_param_12,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_14,
	.param .u64 paged_decode_attn_bf16k_turbo3v_split_param_15,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_16,
	.param .u32 paged_decode_attn_bf16k_turbo3v_split_param_17
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16k_turbo4v(
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_5,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_10,
	.param .f32 paged_decode_attn_bf16k_turbo4v_param_11,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_12,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo4v_param_14,
	.param .u32 paged_decode_attn_bf16k_turbo4v_param_15
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16k_turbo4v_split(
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_0,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_1,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_2,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_3,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_4,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_5,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_6,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_7,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_8,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_9,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_10,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_11,
	.param .f32 paged_decode_attn_bf16k_turbo4v_split_param_12,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_13,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_14,
	.param .u64 paged_decode_attn_bf16k_turbo4v_split_param_15,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_16,
	.param .u32 paged_decode_attn_bf16k_turbo4v_split_param_17
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}
