// The kernel signatures of vector_ops.ptx (docs/kernels.md, "Signature files"),
// written by `sparkrt signatures`.
.visible .entry vector_add_f32(
	.param .u64 vector_add_f32_param_0,
	.param .u64 vector_add_f32_param_1,
	.param .u64 vector_add_f32_param_2,
	.param .u32 vector_add_f32_param_3
)
{
}

.visible .entry fill_u32(
	.param .u64 fill_u32_param_0,
	.param .u32 fill_u32_param_1,
	.param .u32 fill_u32_param_2
)
{
}

.visible .entry axpy_f32(
	.param .align 8 .b8 axpy_f32_param_0[16],
	.param .u64 axpy_f32_param_1,
	.param .u64 axpy_f32_param_2
)
{
}

.visible .entry empty_10_args(
	.param .u64 empty_10_args_param_0,
	.param .u64 empty_10_args_param_1,
	.param .u64 empty_10_args_param_2,
	.param .u64 empty_10_args_param_3,
	.param .u32 empty_10_args_param_4,
	.param .u32 empty_10_args_param_5,
	.param .u32 empty_10_args_param_6,
	.param .u64 empty_10_args_param_7,
	.param .f32 empty_10_args_param_8,
	.param .f32 empty_10_args_param_9
)
{
}

.visible .entry copy_args_u32(
	.param .u64 copy_args_u32_param_0,
	.param .align 4 .b8 copy_args_u32_param_1[136]
)
{
}
