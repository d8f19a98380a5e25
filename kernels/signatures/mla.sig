// The kernel signatures of mla.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry mla_batched_gemv(
	.param .u64 mla_batched_gemv_param_0,
	.param .u64 mla_batched_gemv_param_1,
	.param .u64 mla_batched_gemv_param_2,
	.param .u32 mla_batched_gemv_param_3,
	.param .u32 mla_batched_gemv_param_4,
	.param .u32 mla_batched_gemv_param_5,
	.param .u32 mla_batched_gemv_param_6
)
.maxntid 256, 1, 1
{
}

.visible .entry mla_q_rope_scatter(
	.param .u64 mla_q_rope_scatter_param_0,
	.param .u64 mla_q_rope_scatter_param_1,
	.param .u64 mla_q_rope_scatter_param_2,
	.param .u32 mla_q_rope_scatter_param_3,
	.param .u32 mla_q_rope_scatter_param_4,
	.param .u32 mla_q_rope_scatter_param_5,
	.param .u32 mla_q_rope_scatter_param_6,
	.param .u32 mla_q_rope_scatter_param_7,
	.param .u32 mla_q_rope_scatter_param_8
)
.maxntid 256, 1, 1
{
}

.visible .entry mla_q_rope_writeback(
	.param .u64 mla_q_rope_writeback_param_0,
	.param .u64 mla_q_rope_writeback_param_1,
	.param .u32 mla_q_rope_writeback_param_2,
	.param .u32 mla_q_rope_writeback_param_3,
	.param .u32 mla_q_rope_writeback_param_4,
	.param .u32 mla_q_rope_writeback_param_5
)
.maxntid 256, 1, 1
{
}

.visible .entry mla_cache_assemble(
	.param .u64 mla_cache_assemble_param_0,
	.param .u64 mla_cache_assemble_param_1,
	.param .u64 mla_cache_assemble_param_2,
	.param .u64 mla_cache_assemble_param_3,
	.param .u32 mla_cache_assemble_param_4,
	.param .u32 mla_cache_assemble_param_5,
	.param .u32 mla_cache_assemble_param_6
)
{
}

.visible .entry mla_paged_decode_nvfp4(
	.param .u64 mla_paged_decode_nvfp4_param_0,
	.param .u64 mla_paged_decode_nvfp4_param_1,
	.param .u64 mla_paged_decode_nvfp4_param_2,
	.param .u64 mla_paged_decode_nvfp4_param_3,
	.param .u64 mla_paged_decode_nvfp4_param_4,
	.param .u64 mla_paged_decode_nvfp4_param_5,
	.param .u32 mla_paged_decode_nvfp4_param_6,
	.param .u32 mla_paged_decode_nvfp4_param_7,
	.param .u32 mla_paged_decode_nvfp4_param_8,
	.param .u32 mla_paged_decode_nvfp4_param_9,
	.param .u32 mla_paged_decode_nvfp4_param_10,
	.param .u32 mla_paged_decode_nvfp4_param_11,
	.param .f32 mla_paged_decode_nvfp4_param_12,
	.param .u64 mla_paged_decode_nvfp4_param_13,
	.param .u64 mla_paged_decode_nvfp4_param_14
)
.maxntid 320, 1, 1
.minnctapersm 1
{
}

.visible .entry mla_paged_decode_nvfp4_split(
	.param .u64 mla_paged_decode_nvfp4_split_param_0,
	.param .u64 mla_paged_decode_nvfp4_split_param_1,
	.param .u64 mla_paged_decode_nvfp4_split_param_2,
	.param .u64 mla_paged_decode_nvfp4_split_param_3,
	.param .u64 mla_paged_decode_nvfp4_split_param_4,
	.param .u64 mla_paged_decode_nvfp4_split_param_5,
	.param .u64 mla_paged_decode_nvfp4_split_param_6,
	.param .u32 mla_paged_decode_nvfp4_split_param_7,
	.param .u32 mla_paged_decode_nvfp4_split_param_8,
	.param .u32 mla_paged_decode_nvfp4_split_param_9,
	.param .u32 mla_paged_decode_nvfp4_split_param_10,
	.param .u32 mla_paged_decode_nvfp4_split_param_11,
	.param .u32 mla_paged_decode_nvfp4_split_param_12,
	.param .f32 mla_paged_decode_nvfp4_split_param_13,
	.param .u64 mla_paged_decode_nvfp4_split_param_14,
	.param .u64 mla_paged_decode_nvfp4_split_param_15
)
.maxntid 320, 1, 1
.minnctapersm 1
{
}

.visible .entry mla_paged_decode_fp8(
	.param .u64 mla_paged_decode_fp8_param_0,
	.param .u64 mla_paged_decode_fp8_param_1,
	.param .u64 mla_paged_decode_fp8_param_2,
	.param .u64 mla_paged_decode_fp8_param_3,
	.param .u64 mla_paged_decode_fp8_param_4,
	.param .u64 mla_paged_decode_fp8_param_5,
	.param .u32 mla_paged_decode_fp8_param_6,
	.param .u32 mla_paged_decode_fp8_param_7,
	.param .u32 mla_paged_decode_fp8_param_8,
	.param .u32 mla_paged_decode_fp8_param_9,
	.param .u32 mla_paged_decode_fp8_param_10,
	.param .u32 mla_paged_decode_fp8_param_11,
	.param .f32 mla_paged_decode_fp8_param_12,
	.param .f32 mla_paged_decode_fp8_param_13,
	.param .f32 mla_paged_decode_fp8_param_14,
	.param .u64 mla_paged_decode_fp8_param_15,
	.param .u32 mla_paged_decode_fp8_param_16,
	.param .u64 mla_paged_decode_fp8_param_17,
	.param .u64 mla_paged_decode_fp8_param_18,
	.param .u32 mla_paged_decode_fp8_param_19
)
.maxntid 320, 1, 1
.minnctapersm 1
{
}

.visible .entry mla_paged_decode_fp8_split(
	.param .u64 mla_paged_decode_fp8_split_param_0,
	.param .u64 mla_paged_decode_fp8_split_param_1,
	.param .u64 mla_paged_decode_fp8_split_param_2,
	.param .u64 mla_paged_decode_fp8_split_param_3,
	.param .u64 mla_paged_decode_fp8_split_param_4,
	.param .u64 mla_paged_decode_fp8_split_param_5,
	.param .u64 mla_paged_decode_fp8_split_param_6,
	.param .u32 mla_paged_decode_fp8_split_param_7,
	.param .u32 mla_paged_decode_fp8_split_param_8,
	.param .u32 mla_paged_decode_fp8_split_param_9,
	.param .u32 mla_paged_decode_fp8_split_param_10,
	.param .u32 mla_paged_decode_fp8_split_param_11,
	.param .u32 mla_paged_decode_fp8_split_param_12,
	.param .f32 mla_paged_decode_fp8_split_param_13,
	.param .f32 mla_paged_decode_fp8_split_param_14,
	.param .f32 mla_paged_decode_fp8_split_param_15,
	.param .u64 mla_paged_decode_fp8_split_param_16,
	.param .u32 mla_paged_decode_fp8_split_param_17,
	.param .u64 mla_paged_decode_fp8_split_param_18,
	.param .u32 mla_paged_decode_fp8_split_param_19
)
.maxntid 320, 1, 1
.minnctapersm 1
{
}

.visible .entry mla_decode_combine(
	.param .u64 mla_decode_combine_param_0,
	.param .u64 mla_decode_combine_param_1,
	.param .u64 mla_decode_combine_param_2,
	.param .u64 mla_decode_combine_param_3,
	.param .u32 mla_decode_combine_param_4,
	.param .u32 mla_decode_combine_param_5,
	.param .u32 mla_decode_combine_param_6
)
.maxntid 256, 1, 1
{
}
