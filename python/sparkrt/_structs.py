"""ctypes mirrors of the structs in sparkrt_c.h, field for field in the
header's order and types (tests/test_abi.py compiles the header and compares
every offset and size)."""
import ctypes
from ctypes import (c_char_p, c_double, c_float, c_int32, c_int64, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)

# Marks a SparkrtDevicePtr field (a c_uint64 the ops fill from pointer-like
# objects); other c_uint64 fields are plain counts.
PTR = object()


class ApiStruct(ctypes.Structure):
    """A header struct that begins with struct_size.

    api_size() is what the header's SPARKRT_C_<NAME>_SIZE macro gives:
    offsetof(last field) + sizeof(last field), which is smaller than
    ctypes.sizeof where the struct has tail padding.
    """
    pointer_fields = frozenset()

    @classmethod
    def api_size(cls):
        name, ctype = cls._fields_[-1][:2]
        return getattr(cls, name).offset + ctypes.sizeof(ctype)

    @classmethod
    def new(cls):
        s = cls()
        s.struct_size = cls.api_size()
        return s

    @classmethod
    def field_names(cls):
        return [f[0] for f in cls._fields_ if f[0] != "struct_size"]


def _api_struct(name, spec):
    """An ApiStruct subclass from (field, ctype or PTR) pairs after struct_size."""
    fields = [("struct_size", c_size_t)]
    pointers = []
    for field, ctype in spec:
        if ctype is PTR:
            pointers.append(field)
            ctype = c_uint64
        fields.append((field, ctype))
    return type(name, (ApiStruct,), {"_fields_": fields, "pointer_fields": frozenset(pointers)})


U32x3 = c_uint32 * 3

OpenOptions = _api_struct("OpenOptions", [
    ("backend", c_char_p),
    ("device_index", c_int32),
])

DeviceProperties = _api_struct("DeviceProperties", [
    ("backend", c_char_p),
    ("plugin_path", c_char_p),
    ("plugin_version", c_char_p),
    ("name", c_char_p),
    ("architecture", c_char_p),
    ("driver", c_char_p),
    ("index", c_int32),
    ("multiprocessor_count", c_uint32),
    ("total_memory", c_uint64),
    ("warp_size", c_uint32),
    ("max_threads_per_block", c_uint32),
    ("max_block_dim", U32x3),
    ("max_grid_dim", U32x3),
    ("max_shared_memory_per_block", c_uint32),
    ("max_shared_memory_per_block_optin", c_uint32),
    ("compute_capability_major", c_uint32),
    ("compute_capability_minor", c_uint32),
    ("accepts_ptx", c_uint8),
    ("accepts_cubin", c_uint8),
    ("accepts_spirv", c_uint8),
    ("accepts_signatures", c_uint8),
    ("emulated", c_uint8),
    ("has_graphs", c_uint8),
    ("has_collectives", c_uint8),
    ("supports_dependent_launch", c_uint8),
    ("supports_clusters", c_uint8),
    ("max_cluster_size", c_uint32),
])

KernelInfo = _api_struct("KernelInfo", [
    ("module", c_char_p),
    ("entry", c_char_p),
    ("declaration", c_char_p),
    ("num_params", c_uint32),
    ("params_size", c_uint32),
    ("reqntid", U32x3),
    ("maxntid", U32x3),
    ("unsupported", c_char_p),
])

ParamInfo = _api_struct("ParamInfo", [
    ("name", c_char_p),
    ("type_name", c_char_p),
    ("type", c_int32),
    ("size", c_uint32),
    ("align", c_uint32),
    ("offset", c_uint32),
])


class ArgValue(ctypes.Union):
    _fields_ = [
        ("ptr", c_uint64),
        ("u32", c_uint32),
        ("i32", c_int32),
        ("u64", c_uint64),
        ("i64", c_int64),
        ("f32", c_float),
        ("f64", c_double),
        ("bytes", c_void_p),
    ]


class Arg(ctypes.Structure):
    """sparkrt_arg: int32 kind, uint32 size, uint32 align, uint32 reserved,
    then the 8-byte value union."""
    _fields_ = [
        ("kind", c_int32),
        ("size", c_uint32),
        ("align", c_uint32),
        ("reserved", c_uint32),
        ("value", ArgValue),
    ]


LaunchConfig = _api_struct("LaunchConfig", [
    ("grid", U32x3),
    ("block", U32x3),
    ("shared_mem_bytes", c_uint32),
    ("stream", c_uint64),
    ("flags", c_uint32),
    ("cluster", U32x3),
])

# sparkrt_launch_config.flags bits (SPARKRT_LAUNCH_* of plugin_api.h).
LAUNCH_DEPENDENT = 1


class UniqueId(ctypes.Structure):
    """SparkrtUniqueId: 128 opaque bytes."""
    _fields_ = [("bytes", c_uint8 * 128)]


# ---- ops ------------------------------------------------------------------

FillSlotsArgs = _api_struct("FillSlotsArgs", [
    ("slots", PTR),
    ("block_table", PTR),
    ("start_pos", c_uint32),
    ("count", c_uint32),
    ("block_size", c_uint32),
])

ReshapeAndCacheArgs = _api_struct("ReshapeAndCacheArgs", [
    ("key", PTR),
    ("value", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("slot_mapping", PTR),
    ("num_tokens", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("key_stride", c_uint32),
    ("value_stride", c_uint32),
])

ReshapeAndCacheVOnlyArgs = _api_struct("ReshapeAndCacheVOnlyArgs", [
    ("value", PTR),
    ("v_cache", PTR),
    ("slot_mapping", PTR),
    ("num_tokens", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("value_stride", c_uint32),
])

ReshapeAndCacheFp8Args = _api_struct("ReshapeAndCacheFp8Args", [
    ("key", PTR),
    ("value", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("slot_mapping", PTR),
    ("num_tokens", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("k_scale", c_float),
    ("v_scale", c_float),
    ("key_stride", c_uint32),
    ("value_stride", c_uint32),
    ("cache_stride", c_uint64),
])

FusedKNormRopeArgs = _api_struct("FusedKNormRopeArgs", [
    ("variant", c_int32),
    ("k_in", PTR),
    ("k_norm_weight", PTR),
    ("positions", PTR),
    ("pos_t", PTR),
    ("pos_h", PTR),
    ("pos_w", PTR),
    ("k_cache", PTR),
    ("slot_mapping", PTR),
    ("num_tokens", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("rotary_dim", c_uint32),
    ("block_size", c_uint32),
    ("rms_eps", c_float),
    ("theta", c_float),
    ("inv_scale", c_float),
])

PagedDecodeArgs = _api_struct("PagedDecodeArgs", [
    ("cache_format", c_int32),
    ("q", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("out", PTR),
    ("block_tables", PTR),
    ("seq_lens", PTR),
    ("max_blocks_per_seq", c_uint32),
    ("num_seqs", c_uint32),
    ("num_q_heads", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("inv_sqrt_d", c_float),
    ("k_scale", c_float),
    ("v_scale", c_float),
    ("q_stride", c_uint32),
    ("cache_stride", c_uint64),
    ("sliding_window", c_uint32),
    ("max_seq_len", c_uint32),
    ("workspace", PTR),
    ("workspace_bytes", c_uint64),
    ("num_splits", c_uint32),
])

TurboCacheLayout = _api_struct("TurboCacheLayout", [
    ("k_block_stride_bytes", c_uint64),
    ("v_data_section_bytes", c_uint64),
    ("v_block_stride_bytes", c_uint64),
])

ReshapeAndCacheTurboArgs = _api_struct("ReshapeAndCacheTurboArgs", [
    ("bits", c_uint32),
    ("key", PTR),
    ("value", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("slot_mapping", PTR),
    ("num_tokens", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("key_stride", c_uint32),
    ("value_stride", c_uint32),
    ("k_block_stride_bytes", c_uint64),
    ("v_block_stride_bytes", c_uint64),
    ("v_data_section_bytes", c_uint64),
])

HadamardArgs = _api_struct("HadamardArgs", [
    ("in", PTR),
    ("out", PTR),
    ("num_tokens", c_uint32),
    ("num_heads", c_uint32),
    ("head_dim", c_uint32),
    ("in_stride", c_uint32),
    ("out_stride", c_uint32),
])

PagedDecodeTurboArgs = _api_struct("PagedDecodeTurboArgs", [
    ("bits", c_uint32),
    ("q", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("out", PTR),
    ("block_tables", PTR),
    ("seq_lens", PTR),
    ("max_blocks_per_seq", c_uint32),
    ("num_seqs", c_uint32),
    ("num_q_heads", c_uint32),
    ("num_kv_heads", c_uint32),
    ("head_dim", c_uint32),
    ("block_size", c_uint32),
    ("inv_sqrt_d", c_float),
    ("q_stride", c_uint32),
    ("v_block_stride_bytes", c_uint64),
    ("v_data_section_bytes", c_uint64),
    ("sliding_window", c_uint32),
    ("max_seq_len", c_uint32),
    ("workspace", PTR),
    ("workspace_bytes", c_uint64),
    ("num_splits", c_uint32),
])

MlaBatchedGemvArgs = _api_struct("MlaBatchedGemvArgs", [
    ("input", PTR),
    ("weight", PTR),
    ("output", PTR),
    ("n_out", c_uint32),
    ("k", c_uint32),
    ("num_heads", c_uint32),
    ("input_stride", c_uint32),
    ("output_stride", c_uint32),
])

MlaQRopeScatterArgs = _api_struct("MlaQRopeScatterArgs", [
    ("q_full", PTR),
    ("q_absorbed_buf", PTR),
    ("q_rope_contiguous", PTR),
    ("nq", c_uint32),
    ("hd", c_uint32),
    ("nope", c_uint32),
    ("rope", c_uint32),
    ("kv_lora", c_uint32),
    ("mla_cache_dim", c_uint32),
])

MlaQRopeWritebackArgs = _api_struct("MlaQRopeWritebackArgs", [
    ("q_rope_direct", PTR),
    ("q_absorbed_buf", PTR),
    ("nq", c_uint32),
    ("rope", c_uint32),
    ("kv_lora", c_uint32),
    ("mla_cache_dim", c_uint32),
])

MlaCacheAssembleArgs = _api_struct("MlaCacheAssembleArgs", [
    ("kv_latent", PTR),
    ("k_rope", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("kv_lora", c_uint32),
    ("rope", c_uint32),
    ("mla_cache_dim", c_uint32),
])

MlaPagedDecodeArgs = _api_struct("MlaPagedDecodeArgs", [
    ("cache_format", c_int32),
    ("q", PTR),
    ("k_cache", PTR),
    ("v_cache", PTR),
    ("o", PTR),
    ("block_tables", PTR),
    ("seq_lens", PTR),
    ("max_blocks_per_seq", c_uint32),
    ("num_q_heads", c_uint32),
    ("num_kv_heads", c_uint32),
    ("q_head_dim", c_uint32),
    ("kv_cache_dim", c_uint32),
    ("block_size", c_uint32),
    ("inv_sqrt_d", c_float),
    ("k_scale", c_float),
    ("v_scale", c_float),
    ("cache_stride", c_uint64),
    ("block_stride_bytes", c_uint64),
    ("data_section_bytes", c_uint64),
    ("num_seqs", c_uint32),
    ("sliding_window", c_uint32),
    ("sinks", PTR),
    ("comp_pool", PTR),
    ("comp_block_count", c_uint32),
    ("workspace", PTR),
    ("workspace_bytes", c_uint64),
    ("num_splits", c_uint32),
])

TraceOptions = _api_struct("TraceOptions", [
    ("device_times", c_uint8),
])

MlaNvfp4BlockLayout = _api_struct("MlaNvfp4BlockLayout", [
    ("data_section_bytes", c_uint64),
    ("block_stride_bytes", c_uint64),
])

# The header's name and SIZE macro of each struct, for tests/test_abi.py.
HEADER_NAMES = {
    OpenOptions: ("sparkrt_open_options", "SPARKRT_C_OPEN_OPTIONS_SIZE"),
    DeviceProperties: ("sparkrt_device_properties", "SPARKRT_C_DEVICE_PROPERTIES_SIZE"),
    KernelInfo: ("sparkrt_kernel_info", "SPARKRT_C_KERNEL_INFO_SIZE"),
    ParamInfo: ("sparkrt_param_info", "SPARKRT_C_PARAM_INFO_SIZE"),
    LaunchConfig: ("sparkrt_launch_config", "SPARKRT_C_LAUNCH_CONFIG_SIZE"),
    TraceOptions: ("sparkrt_trace_options", "SPARKRT_C_TRACE_OPTIONS_SIZE"),
    FillSlotsArgs: ("sparkrt_fill_slots_args", "SPARKRT_C_FILL_SLOTS_ARGS_SIZE"),
    ReshapeAndCacheArgs: ("sparkrt_reshape_and_cache_args",
                          "SPARKRT_C_RESHAPE_AND_CACHE_ARGS_SIZE"),
    ReshapeAndCacheVOnlyArgs: ("sparkrt_reshape_and_cache_v_only_args",
                               "SPARKRT_C_RESHAPE_AND_CACHE_V_ONLY_ARGS_SIZE"),
    ReshapeAndCacheFp8Args: ("sparkrt_reshape_and_cache_fp8_args",
                             "SPARKRT_C_RESHAPE_AND_CACHE_FP8_ARGS_SIZE"),
    FusedKNormRopeArgs: ("sparkrt_fused_k_norm_rope_args",
                         "SPARKRT_C_FUSED_K_NORM_ROPE_ARGS_SIZE"),
    PagedDecodeArgs: ("sparkrt_paged_decode_args", "SPARKRT_C_PAGED_DECODE_ARGS_SIZE"),
    TurboCacheLayout: ("sparkrt_turbo_cache_layout", "SPARKRT_C_TURBO_CACHE_LAYOUT_SIZE"),
    ReshapeAndCacheTurboArgs: ("sparkrt_reshape_and_cache_turbo_args",
                               "SPARKRT_C_RESHAPE_AND_CACHE_TURBO_ARGS_SIZE"),
    HadamardArgs: ("sparkrt_hadamard_args", "SPARKRT_C_HADAMARD_ARGS_SIZE"),
    PagedDecodeTurboArgs: ("sparkrt_paged_decode_turbo_args",
                           "SPARKRT_C_PAGED_DECODE_TURBO_ARGS_SIZE"),
    MlaBatchedGemvArgs: ("sparkrt_mla_batched_gemv_args", "SPARKRT_C_MLA_BATCHED_GEMV_ARGS_SIZE"),
    MlaQRopeScatterArgs: ("sparkrt_mla_q_rope_scatter_args",
                          "SPARKRT_C_MLA_Q_ROPE_SCATTER_ARGS_SIZE"),
    MlaQRopeWritebackArgs: ("sparkrt_mla_q_rope_writeback_args",
                            "SPARKRT_C_MLA_Q_ROPE_WRITEBACK_ARGS_SIZE"),
    MlaCacheAssembleArgs: ("sparkrt_mla_cache_assemble_args",
                           "SPARKRT_C_MLA_CACHE_ASSEMBLE_ARGS_SIZE"),
    MlaPagedDecodeArgs: ("sparkrt_mla_paged_decode_args", "SPARKRT_C_MLA_PAGED_DECODE_ARGS_SIZE"),
    MlaNvfp4BlockLayout: ("sparkrt_mla_nvfp4_block_layout",
                          "SPARKRT_C_MLA_NVFP4_BLOCK_LAYOUT_SIZE"),
}
