// The kernel signatures of kv_cache.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry fill_slots_from_block_table(
	.param .u64 fill_slots_from_block_table_param_0,
	.param .u64 fill_slots_from_block_table_param_1,
	.param .u32 fill_slots_from_block_table_param_2,
	.param .u32 fill_slots_from_block_table_param_3,
	.param .u32 fill_slots_from_block_table_param_4
)
{
}

.visible .entry reshape_and_cache(
	.param .u64 reshape_and_cache_param_0,
	.param .u64 reshape_and_cache_param_1,
	.param .u64 reshape_and_cache_param_2,
	.param .u64 reshape_and_cache_param_3,
	.param .u64 reshape_and_cache_param_4,
	.param .u32 reshape_and_cache_param_5,
	.param .u32 reshape_and_cache_param_6,
	.param .u32 reshape_and_cache_param_7,
	.param .u32 reshape_and_cache_param_8,
	.param .u32 reshape_and_cache_param_9
)
.maxntid 256, 1, 1
{
}

.visible .entry reshape_and_cache_flash_v_only(
	.param .u64 reshape_and_cache_flash_v_only_param_0,
	.param .u64 reshape_and_cache_flash_v_only_param_1,
	.param .u64 reshape_and_cache_flash_v_only_param_2,
	.param .u32 reshape_and_cache_flash_v_only_param_3,
	.param .u32 reshape_and_cache_flash_v_only_param_4,
	.param .u32 reshape_and_cache_flash_v_only_param_5,
	.param .u32 reshape_and_cache_flash_v_only_param_6
)
.maxntid 256, 1, 1
{
}

.visible .entry reshape_and_cache_fp8(
	.param .u64 reshape_and_cache_fp8_param_0,
	.param .u64 reshape_and_cache_fp8_param_1,
	.param .u64 reshape_and_cache_fp8_param_2,
	.param .u64 reshape_and_cache_fp8_param_3,
	.param .u64 reshape_and_cache_fp8_param_4,
	.param .u32 reshape_and_cache_fp8_param_5,
	.param .u32 reshape_and_cache_fp8_param_6,
	.param .u32 reshape_and_cache_fp8_param_7,
	.param .f32 reshape_and_cache_fp8_param_8,
	.param .f32 reshape_and_cache_fp8_param_9,
	.param .u32 reshape_and_cache_fp8_param_10,
	.param .u32 reshape_and_cache_fp8_param_11,
	.param .u64 reshape_and_cache_fp8_param_12
)
.maxntid 256, 1, 1
{
}

.visible .entry fused_k_norm_rope_cache_write_bf16(
	.param .u64 fused_k_norm_rope_cache_write_bf16_param_0,
	.param .u64 fused_k_norm_rope_cache_write_bf16_param_1,
	.param .u64 fused_k_norm_rope_cache_write_bf16_param_2,
	.param .u64 fused_k_norm_rope_cache_write_bf16_param_3,
	.param .u64 fused_k_norm_rope_cache_write_bf16_param_4,
	.param .u32 fused_k_norm_rope_cache_write_bf16_param_5,
	.param .u32 fused_k_norm_rope_cache_write_bf16_param_6,
	.param .u32 fused_k_norm_rope_cache_write_bf16_param_7,
	.param .u32 fused_k_norm_rope_cache_write_bf16_param_8,
	.param .f32 fused_k_norm_rope_cache_write_bf16_param_9,
	.param .f32 fused_k_norm_rope_cache_write_bf16_param_10
)
{
}

.visible .entry fused_k_norm_rope_cache_write_bf16_mrope(
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_0,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_1,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_2,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_3,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_4,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_5,
	.param .u64 fused_k_norm_rope_cache_write_bf16_mrope_param_6,
	.param .u32 fused_k_norm_rope_cache_write_bf16_mrope_param_7,
	.param .u32 fused_k_norm_rope_cache_write_bf16_mrope_param_8,
	.param .u32 fused_k_norm_rope_cache_write_bf16_mrope_param_9,
	.param .u32 fused_k_norm_rope_cache_write_bf16_mrope_param_10,
	.param .f32 fused_k_norm_rope_cache_write_bf16_mrope_param_11,
	.param .f32 fused_k_norm_rope_cache_write_bf16_mrope_param_12
)
{
}

.visible .entry fused_k_norm_rope_cache_write_fp8(
	.param .u64 fused_k_norm_rope_cache_write_fp8_param_0,
	.param .u64 fused_k_norm_rope_cache_write_fp8_param_1,
	.param .u64 fused_k_norm_rope_cache_write_fp8_param_2,
	.param .u64 fused_k_norm_rope_cache_write_fp8_param_3,
	.param .u64 fused_k_norm_rope_cache_write_fp8_param_4,
	.param .u32 fused_k_norm_rope_cache_write_fp8_param_5,
	.param .u32 fused_k_norm_rope_cache_write_fp8_param_6,
	.param .u32 fused_k_norm_rope_cache_write_fp8_param_7,
	.param .u32 fused_k_norm_rope_cache_write_fp8_param_8,
	.param .f32 fused_k_norm_rope_cache_write_fp8_param_9,
	.param .f32 fused_k_norm_rope_cache_write_fp8_param_10,
	.param .f32 fused_k_norm_rope_cache_write_fp8_param_11
)
{
}
