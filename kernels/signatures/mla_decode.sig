// The kernel signatures of mla_decode.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry k3_mla_maybe_rope_f32(
	.param .u64 k3_mla_maybe_rope_f32_param_0,
	.param .u64 k3_mla_maybe_rope_f32_param_1,
	.param .u32 k3_mla_maybe_rope_f32_param_2,
	.param .u32 k3_mla_maybe_rope_f32_param_3,
	.param .u32 k3_mla_maybe_rope_f32_param_4,
	.param .u32 k3_mla_maybe_rope_f32_param_5,
	.param .f32 k3_mla_maybe_rope_f32_param_6,
	.param .u32 k3_mla_maybe_rope_f32_param_7
)
{
}

.visible .entry k3_mla_sdpa_gate_f32(
	.param .u64 k3_mla_sdpa_gate_f32_param_0,
	.param .u64 k3_mla_sdpa_gate_f32_param_1,
	.param .u64 k3_mla_sdpa_gate_f32_param_2,
	.param .u64 k3_mla_sdpa_gate_f32_param_3,
	.param .u64 k3_mla_sdpa_gate_f32_param_4,
	.param .u32 k3_mla_sdpa_gate_f32_param_5,
	.param .u32 k3_mla_sdpa_gate_f32_param_6,
	.param .u32 k3_mla_sdpa_gate_f32_param_7,
	.param .u32 k3_mla_sdpa_gate_f32_param_8,
	.param .u32 k3_mla_sdpa_gate_f32_param_9
)
.maxntid 32, 1, 1
{
}

.visible .entry k3_mla_sdpa_split_f32(
	.param .u64 k3_mla_sdpa_split_f32_param_0,
	.param .u64 k3_mla_sdpa_split_f32_param_1,
	.param .u64 k3_mla_sdpa_split_f32_param_2,
	.param .u64 k3_mla_sdpa_split_f32_param_3,
	.param .u64 k3_mla_sdpa_split_f32_param_4,
	.param .u32 k3_mla_sdpa_split_f32_param_5,
	.param .u32 k3_mla_sdpa_split_f32_param_6,
	.param .u32 k3_mla_sdpa_split_f32_param_7,
	.param .u32 k3_mla_sdpa_split_f32_param_8,
	.param .u32 k3_mla_sdpa_split_f32_param_9
)
.maxntid 256, 1, 1
{
}

.visible .entry k3_mla_sdpa_combine_f32(
	.param .u64 k3_mla_sdpa_combine_f32_param_0,
	.param .u64 k3_mla_sdpa_combine_f32_param_1,
	.param .u64 k3_mla_sdpa_combine_f32_param_2,
	.param .u64 k3_mla_sdpa_combine_f32_param_3,
	.param .u32 k3_mla_sdpa_combine_f32_param_4,
	.param .u32 k3_mla_sdpa_combine_f32_param_5,
	.param .u32 k3_mla_sdpa_combine_f32_param_6,
	.param .u32 k3_mla_sdpa_combine_f32_param_7
)
.maxntid 128, 1, 1
{
}
