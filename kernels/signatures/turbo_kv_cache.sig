// The kernel signatures of turbo_kv_cache.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry reshape_and_cache_flash_bf16k_turbo2v(
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_0,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_1,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_2,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_3,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_4,
	.param .u32 reshape_and_cache_flash_bf16k_turbo2v_param_5,
	.param .u32 reshape_and_cache_flash_bf16k_turbo2v_param_6,
	.param .u32 reshape_and_cache_flash_bf16k_turbo2v_param_7,
	.param .u32 reshape_and_cache_flash_bf16k_turbo2v_param_8,
	.param .u32 reshape_and_cache_flash_bf16k_turbo2v_param_9,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_10,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_11,
	.param .u64 reshape_and_cache_flash_bf16k_turbo2v_param_12
)
.maxntid 256, 1, 1
{
}

.visible .entry reshape_and_cache_flash_bf16k_turbo3v(
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_0,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_1,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_2,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_3,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_4,
	.param .u32 reshape_and_cache_flash_bf16k_turbo3v_param_5,
	.param .u32 reshape_and_cache_flash_bf16k_turbo3v_param_6,
	.param .u32 reshape_and_cache_flash_bf16k_turbo3v_param_7,
	.param .u32 reshape_and_cache_flash_bf16k_turbo3v_param_8,
	.param .u32 reshape_and_cache_flash_bf16k_turbo3v_param_9,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_10,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_11,
	.param .u64 reshape_and_cache_flash_bf16k_turbo3v_param_12
)
.maxntid 256, 1, 1
{
}

.visible .entry reshape_and_cache_flash_bf16k_turbo4v(
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_0,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_1,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_2,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_3,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_4,
	.param .u32 reshape_and_cache_flash_bf16k_turbo4v_param_5,
	.param .u32 reshape_and_cache_flash_bf16k_turbo4v_param_6,
	.param .u32 reshape_and_cache_flash_bf16k_turbo4v_param_7,
	.param .u32 reshape_and_cache_flash_bf16k_turbo4v_param_8,
	.param .u32 reshape_and_cache_flash_bf16k_turbo4v_param_9,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_10,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_11,
	.param .u64 reshape_and_cache_flash_bf16k_turbo4v_param_12
)
.maxntid 256, 1, 1
{
}

.visible .entry hadamard_transform_bf16(
	.param .u64 hadamard_transform_bf16_param_0,
	.param .u64 hadamard_transform_bf16_param_1,
	.param .u32 hadamard_transform_bf16_param_2,
	.param .u32 hadamard_transform_bf16_param_3,
	.param .u32 hadamard_transform_bf16_param_4
)
.maxntid 256, 1, 1
{
}
