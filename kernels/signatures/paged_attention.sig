// The kernel signatures of paged_attention.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry paged_decode_attn_bf16(
	.param .u64 paged_decode_attn_bf16_param_0,
	.param .u64 paged_decode_attn_bf16_param_1,
	.param .u64 paged_decode_attn_bf16_param_2,
	.param .u64 paged_decode_attn_bf16_param_3,
	.param .u64 paged_decode_attn_bf16_param_4,
	.param .u64 paged_decode_attn_bf16_param_5,
	.param .u32 paged_decode_attn_bf16_param_6,
	.param .u32 paged_decode_attn_bf16_param_7,
	.param .u32 paged_decode_attn_bf16_param_8,
	.param .u32 paged_decode_attn_bf16_param_9,
	.param .u32 paged_decode_attn_bf16_param_10,
	.param .f32 paged_decode_attn_bf16_param_11,
	.param .u32 paged_decode_attn_bf16_param_12,
	.param .u32 paged_decode_attn_bf16_param_13
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_fp8(
	.param .u64 paged_decode_attn_fp8_param_0,
	.param .u64 paged_decode_attn_fp8_param_1,
	.param .u64 paged_decode_attn_fp8_param_2,
	.param .u64 paged_decode_attn_fp8_param_3,
	.param .u64 paged_decode_attn_fp8_param_4,
	.param .u64 paged_decode_attn_fp8_param_5,
	.param .u32 paged_decode_attn_fp8_param_6,
	.param .u32 paged_decode_attn_fp8_param_7,
	.param .u32 paged_decode_attn_fp8_param_8,
	.param .u32 paged_decode_attn_fp8_param_9,
	.param .u32 paged_decode_attn_fp8_param_10,
	.param .f32 paged_decode_attn_fp8_param_11,
	.param .f32 paged_decode_attn_fp8_param_12,
	.param .f32 paged_decode_attn_fp8_param_13,
	.param .u32 paged_decode_attn_fp8_param_14,
	.param .u64 paged_decode_attn_fp8_param_15,
	.param .u32 paged_decode_attn_fp8_param_16
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16_split(
	.param .u64 paged_decode_attn_bf16_split_param_0,
	.param .u64 paged_decode_attn_bf16_split_param_1,
	.param .u64 paged_decode_attn_bf16_split_param_2,
	.param .u64 paged_decode_attn_bf16_split_param_3,
	.param .u64 paged_decode_attn_bf16_split_param_4,
	.param .u64 paged_decode_attn_bf16_split_param_5,
	.param .u64 paged_decode_attn_bf16_split_param_6,
	.param .u32 paged_decode_attn_bf16_split_param_7,
	.param .u32 paged_decode_attn_bf16_split_param_8,
	.param .u32 paged_decode_attn_bf16_split_param_9,
	.param .u32 paged_decode_attn_bf16_split_param_10,
	.param .u32 paged_decode_attn_bf16_split_param_11,
	.param .f32 paged_decode_attn_bf16_split_param_12,
	.param .u32 paged_decode_attn_bf16_split_param_13,
	.param .u32 paged_decode_attn_bf16_split_param_14,
	.param .u32 paged_decode_attn_bf16_split_param_15
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_fp8_split(
	.param .u64 paged_decode_attn_fp8_split_param_0,
	.param .u64 paged_decode_attn_fp8_split_param_1,
	.param .u64 paged_decode_attn_fp8_split_param_2,
	.param .u64 paged_decode_attn_fp8_split_param_3,
	.param .u64 paged_decode_attn_fp8_split_param_4,
	.param .u64 paged_decode_attn_fp8_split_param_5,
	.param .u64 paged_decode_attn_fp8_split_param_6,
	.param .u32 paged_decode_attn_fp8_split_param_7,
	.param .u32 paged_decode_attn_fp8_split_param_8,
	.param .u32 paged_decode_attn_fp8_split_param_9,
	.param .u32 paged_decode_attn_fp8_split_param_10,
	.param .u32 paged_decode_attn_fp8_split_param_11,
	.param .f32 paged_decode_attn_fp8_split_param_12,
	.param .f32 paged_decode_attn_fp8_split_param_13,
	.param .f32 paged_decode_attn_fp8_split_param_14,
	.param .u32 paged_decode_attn_fp8_split_param_15,
	.param .u64 paged_decode_attn_fp8_split_param_16,
	.param .u32 paged_decode_attn_fp8_split_param_17,
	.param .u32 paged_decode_attn_fp8_split_param_18
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_bf16_split_merge(
	.param .u64 paged_decode_attn_bf16_split_merge_param_0,
	.param .u64 paged_decode_attn_bf16_split_merge_param_1,
	.param .u64 paged_decode_attn_bf16_split_merge_param_2,
	.param .u64 paged_decode_attn_bf16_split_merge_param_3,
	.param .u64 paged_decode_attn_bf16_split_merge_param_4,
	.param .u64 paged_decode_attn_bf16_split_merge_param_5,
	.param .u64 paged_decode_attn_bf16_split_merge_param_6,
	.param .u64 paged_decode_attn_bf16_split_merge_param_7,
	.param .u64 paged_decode_attn_bf16_split_merge_param_8,
	.param .u32 paged_decode_attn_bf16_split_merge_param_9,
	.param .u32 paged_decode_attn_bf16_split_merge_param_10,
	.param .u32 paged_decode_attn_bf16_split_merge_param_11,
	.param .u32 paged_decode_attn_bf16_split_merge_param_12,
	.param .u32 paged_decode_attn_bf16_split_merge_param_13,
	.param .f32 paged_decode_attn_bf16_split_merge_param_14,
	.param .u32 paged_decode_attn_bf16_split_merge_param_15,
	.param .u32 paged_decode_attn_bf16_split_merge_param_16,
	.param .u32 paged_decode_attn_bf16_split_merge_param_17
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_fp8_split_merge(
	.param .u64 paged_decode_attn_fp8_split_merge_param_0,
	.param .u64 paged_decode_attn_fp8_split_merge_param_1,
	.param .u64 paged_decode_attn_fp8_split_merge_param_2,
	.param .u64 paged_decode_attn_fp8_split_merge_param_3,
	.param .u64 paged_decode_attn_fp8_split_merge_param_4,
	.param .u64 paged_decode_attn_fp8_split_merge_param_5,
	.param .u64 paged_decode_attn_fp8_split_merge_param_6,
	.param .u64 paged_decode_attn_fp8_split_merge_param_7,
	.param .u64 paged_decode_attn_fp8_split_merge_param_8,
	.param .u32 paged_decode_attn_fp8_split_merge_param_9,
	.param .u32 paged_decode_attn_fp8_split_merge_param_10,
	.param .u32 paged_decode_attn_fp8_split_merge_param_11,
	.param .u32 paged_decode_attn_fp8_split_merge_param_12,
	.param .u32 paged_decode_attn_fp8_split_merge_param_13,
	.param .f32 paged_decode_attn_fp8_split_merge_param_14,
	.param .f32 paged_decode_attn_fp8_split_merge_param_15,
	.param .f32 paged_decode_attn_fp8_split_merge_param_16,
	.param .u32 paged_decode_attn_fp8_split_merge_param_17,
	.param .u64 paged_decode_attn_fp8_split_merge_param_18,
	.param .u32 paged_decode_attn_fp8_split_merge_param_19,
	.param .u32 paged_decode_attn_fp8_split_merge_param_20
)
.maxntid 256, 1, 1
.minnctapersm 2
{
}

.visible .entry paged_decode_attn_combine(
	.param .u64 paged_decode_attn_combine_param_0,
	.param .u64 paged_decode_attn_combine_param_1,
	.param .u64 paged_decode_attn_combine_param_2,
	.param .u32 paged_decode_attn_combine_param_3,
	.param .u32 paged_decode_attn_combine_param_4,
	.param .u32 paged_decode_attn_combine_param_5
)
.maxntid 256, 1, 1
{
}
