"""The op wrappers of sparkrt_c.h: KV-cache writes, paged decode attention,
the TurboQuant caches and MLA.

Each op takes the device, then keyword arguments named as the fields of its C
struct (no defaults: every field is given, zero where the header says 0 means
"none" or "choose"), then `stream`:

    sparkrt.ops.reshape_and_cache(
        dev, key=k, value=v, k_cache=kc, v_cache=vc, slot_mapping=slots,
        num_tokens=n, num_kv_heads=8, head_dim=128, block_size=16,
        key_stride=1024, value_stride=1024, stream=s)

Pointer fields take what kernel launches take (DeviceBuffer, DeviceArray,
int, None, torch tensors, __cuda_array_interface__ objects). A missing or
unknown keyword is a TypeError; the op's own checks raise sparkrt.Error with
the runtime's message. Ops return before their kernels finish. The field
`in` of hadamard_transform_bf16 may also be spelt `in_`.
"""
import ctypes
import enum
import inspect
from ctypes import byref
from typing import NamedTuple

from . import _args, _structs
from ._lib import check, library
from .device import stream_handle


class CacheFormat(enum.IntEnum):
    """sparkrt_cache_format: the cache_format of paged_decode_attn (BF16, FP8)
    and of mla_paged_decode (FP8, NVFP4)."""
    BF16 = 1
    FP8 = 2
    NVFP4 = 3


class FusedKVariant(enum.IntEnum):
    """sparkrt_fused_k_variant: fused_k_norm_rope_cache_write's variant."""
    BF16 = 1
    BF16_MROPE = 2
    FP8 = 3


_INT_RANGES = {
    ctypes.c_uint32: (0, 2**32 - 1),
    ctypes.c_int32: (-2**31, 2**31 - 1),
    ctypes.c_uint64: (0, 2**64 - 1),
}


def _set_field(s, op, field, ctype, value):
    what = f"{op}: {field}"
    if field in s.pointer_fields:
        setattr(s, field, _args.device_pointer(value, what))
    elif ctype is ctypes.c_float:
        if not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise TypeError(f"{what}: expected a number, got {type(value).__name__}")
        setattr(s, field, float(value))
    else:
        x = _args._integer(value, what)
        lo, hi = _INT_RANGES[ctype]
        if not lo <= x <= hi:
            raise OverflowError(f"{what}: {x} is out of range [{lo}, {hi}]")
        setattr(s, field, x)


def _make_op(name, struct_cls, summary):
    c_function = "sparkrt_" + name
    fields = struct_cls.field_names()
    ctypes_of = dict(struct_cls._fields_)
    py_names = {f: (f + "_" if f in ("in",) else f) for f in fields}

    def op(device, stream=None, **kwargs):
        given = {}
        for f in fields:
            alias = py_names[f]
            if alias != f and f in kwargs and alias in kwargs:
                raise TypeError(f"{name}() got both {f!r} and {alias!r}")
            if f in kwargs:
                given[f] = kwargs.pop(f)
            elif alias in kwargs:
                given[f] = kwargs.pop(alias)
        problems = []
        if kwargs:
            unknown = sorted(kwargs)
            plural = "s" if len(unknown) > 1 else ""
            problems.append(f"got an unexpected keyword argument{plural} "
                            + ", ".join(repr(u) for u in unknown))
        missing = [py_names[f] for f in fields if f not in given]
        if missing:
            plural = "s" if len(missing) > 1 else ""
            problems.append(f"missing keyword argument{plural} "
                            + ", ".join(repr(m) for m in missing))
        if problems:
            raise TypeError(f"{name}() " + "; ".join(problems) +
                            f" (its fields: {', '.join(py_names[f] for f in fields)})")
        s = struct_cls.new()
        for f in fields:
            _set_field(s, name, f, ctypes_of[f], given[f])
        check(getattr(library(), c_function)(device._h, byref(s), stream_handle(stream)))

    params = [inspect.Parameter("device", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(py_names[f], inspect.Parameter.KEYWORD_ONLY) for f in fields]
    params.append(inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None))
    op.__signature__ = inspect.Signature(params)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"{summary}\n\nCalls {c_function} with a {struct_cls.__name__} "
                  f"(sparkrt_c.h) of these fields, in the header's order: "
                  f"{', '.join(py_names[f] for f in fields)}. `stream`: a Stream, an int "
                  "handle, or None (the default stream).")
    op.args_struct = struct_cls
    return op


# ---- KV-cache ops (module kv_cache) ---------------------------------------

fill_slots_from_block_table = _make_op(
    "fill_slots_from_block_table", _structs.FillSlotsArgs,
    "slots[i] = block_table[(start_pos + i) // block_size] * block_size + "
    "(start_pos + i) % block_size for i < count (slots i64, block_table i32).")

reshape_and_cache = _make_op(
    "reshape_and_cache", _structs.ReshapeAndCacheArgs,
    "Writes each token's bf16 key and value rows into its slot of both caches "
    "([blocks][block_size][num_kv_heads][head_dim]); a negative slot skips the token.")

reshape_and_cache_flash_v_only = _make_op(
    "reshape_and_cache_flash_v_only", _structs.ReshapeAndCacheVOnlyArgs,
    "The value half of reshape_and_cache.")

reshape_and_cache_fp8 = _make_op(
    "reshape_and_cache_fp8", _structs.ReshapeAndCacheFp8Args,
    "Quantising write: k_cache = fp8_sat(key / k_scale), v_cache likewise.")

fused_k_norm_rope_cache_write = _make_op(
    "fused_k_norm_rope_cache_write", _structs.FusedKNormRopeArgs,
    "Fused K path: RMSNorm, RoPE and the cache write, rounded once; `variant` is a "
    "FusedKVariant.")

# ---- paged decode attention ------------------------------------------------

paged_decode_attn = _make_op(
    "paged_decode_attn", _structs.PagedDecodeArgs,
    "Decode attention, one query token per sequence, GQA, optional sliding window, over a "
    "bf16 or fp8 paged cache (`cache_format`, a CacheFormat). Split-KV needs a workspace of "
    "paged_decode_workspace_bytes, zeroed once after allocation (decode_workspace).")


def paged_decode_workspace_bytes(num_seqs, num_q_heads, head_dim, max_splits=0):
    """Workspace bytes paged_decode_attn needs for up to `max_splits` splits
    (0: the op's largest)."""
    vals = [_args._integer(v, n) for v, n in ((num_seqs, "num_seqs"),
                                                (num_q_heads, "num_q_heads"),
                                                (head_dim, "head_dim"),
                                                (max_splits, "max_splits"))]
    for v in vals:
        if not 0 <= v < 2**32:
            raise OverflowError(f"paged_decode_workspace_bytes: {v} is out of range")
    return library().sparkrt_paged_decode_workspace_bytes(*vals)


def decode_workspace(device, num_seqs, num_q_heads, head_dim, max_splits=0):
    """A zeroed DeviceBuffer of paged_decode_workspace_bytes(...): pass it as
    `workspace` and its nbytes as `workspace_bytes` on every call."""
    buf = device.alloc(paged_decode_workspace_bytes(num_seqs, num_q_heads, head_dim,
                                                    max_splits))
    device.memset(buf, 0)
    return buf


# ---- TurboQuant V caches ---------------------------------------------------

class TurboCacheLayout(NamedTuple):
    """Strides of a TurboQuant cache pair (sparkrt_turbo_cache_layout)."""
    k_block_stride_bytes: int
    v_data_section_bytes: int
    v_block_stride_bytes: int


def turbo_cache_layout(bits, block_size, num_kv_heads, head_dim):
    """The layout of a TurboQuant cache of `bits` (2, 3 or 4)."""
    vals = [_args._integer(v, n) for v, n in ((bits, "bits"), (block_size, "block_size"),
                                                (num_kv_heads, "num_kv_heads"),
                                                (head_dim, "head_dim"))]
    for v in vals:
        if not 0 <= v < 2**32:
            raise OverflowError(f"turbo_cache_layout: {v} is out of range")
    out = _structs.TurboCacheLayout.new()
    check(library().sparkrt_turbo_cache_layout_get(*vals, byref(out)))
    return TurboCacheLayout(out.k_block_stride_bytes, out.v_data_section_bytes,
                            out.v_block_stride_bytes)


reshape_and_cache_turbo = _make_op(
    "reshape_and_cache_turbo", _structs.ReshapeAndCacheTurboArgs,
    "K raw, V (already rotated) quantized to `bits`, into each token's slot.")

hadamard_transform_bf16 = _make_op(
    "hadamard_transform_bf16", _structs.HadamardArgs,
    "out = H x / sqrt(head_dim) per (token, head) row: its own inverse.")

paged_decode_attn_turbo = _make_op(
    "paged_decode_attn_turbo", _structs.PagedDecodeTurboArgs,
    "Decode attention over a bf16 K cache and a TurboQuant V cache; the output is rotated "
    "(apply hadamard_transform_bf16 to read it).")

# ---- MLA (module mla) ------------------------------------------------------

mla_batched_gemv = _make_op(
    "mla_batched_gemv", _structs.MlaBatchedGemvArgs,
    "output[h * output_stride + n] = sum_k weight[h][n][k] * input[h * input_stride + k] for "
    "h < num_heads, n < n_out (bf16, f32 accumulation).")

mla_q_rope_scatter = _make_op(
    "mla_q_rope_scatter", _structs.MlaQRopeScatterArgs,
    "Copies each head's rope part q_full[h][nope, nope + rope) to "
    "q_absorbed_buf[h][kv_lora, kv_lora + rope) and to q_rope_contiguous[h].")

mla_q_rope_writeback = _make_op(
    "mla_q_rope_writeback", _structs.MlaQRopeWritebackArgs,
    "q_absorbed_buf[h][kv_lora, kv_lora + rope) = q_rope_direct[h][0, rope).")

mla_cache_assemble = _make_op(
    "mla_cache_assemble", _structs.MlaCacheAssembleArgs,
    "One token's bf16 cache rows: k_cache = [kv_latent | k_rope | zeros], "
    "v_cache = [kv_latent | zeros], mla_cache_dim values each.")

mla_paged_decode = _make_op(
    "mla_paged_decode", _structs.MlaPagedDecodeArgs,
    "MLA decode attention over an FP8 or NVFP4 paged cache (`cache_format`, a CacheFormat); "
    "FP8 reads k_scale, v_scale, cache_stride, sliding_window, sinks, comp_pool and "
    "comp_block_count, NVFP4 block_stride_bytes and data_section_bytes "
    "(mla_nvfp4_block_layout). Split-KV needs a workspace of mla_decode_workspace_bytes.")


def _u32_args(function, pairs):
    vals = [_args._integer(v, n) for v, n in pairs]
    for v in vals:
        if not 0 <= v < 2**32:
            raise OverflowError(f"{function}: {v} is out of range")
    return vals


def mla_decode_workspace_bytes(num_seqs, num_q_heads, kv_cache_dim, max_splits=0):
    """Workspace bytes mla_paged_decode needs for up to `max_splits` splits
    (0: the op's largest)."""
    vals = _u32_args("mla_decode_workspace_bytes",
                     ((num_seqs, "num_seqs"), (num_q_heads, "num_q_heads"),
                      (kv_cache_dim, "kv_cache_dim"), (max_splits, "max_splits")))
    return library().sparkrt_mla_decode_workspace_bytes(*vals)


class MlaNvfp4BlockLayout(NamedTuple):
    """The bytes of one NVFP4 MLA cache block (sparkrt_mla_nvfp4_block_layout)."""
    data_section_bytes: int
    block_stride_bytes: int


def mla_nvfp4_block_layout(block_size, num_kv_heads, kv_cache_dim):
    """The layout of an NVFP4 cache block of `block_size` tokens, its scales
    packed right after the data."""
    vals = _u32_args("mla_nvfp4_block_layout",
                     ((block_size, "block_size"), (num_kv_heads, "num_kv_heads"),
                      (kv_cache_dim, "kv_cache_dim")))
    out = _structs.MlaNvfp4BlockLayout.new()
    check(library().sparkrt_mla_nvfp4_block_layout_get(*vals, byref(out)))
    return MlaNvfp4BlockLayout(out.data_section_bytes, out.block_stride_bytes)


__all__ = [
    "CacheFormat", "FusedKVariant", "TurboCacheLayout",
    "fill_slots_from_block_table", "reshape_and_cache", "reshape_and_cache_flash_v_only",
    "reshape_and_cache_fp8", "fused_k_norm_rope_cache_write", "paged_decode_attn",
    "paged_decode_workspace_bytes", "decode_workspace", "turbo_cache_layout",
    "reshape_and_cache_turbo", "hadamard_transform_bf16", "paged_decode_attn_turbo",
    "MlaNvfp4BlockLayout", "mla_batched_gemv", "mla_q_rope_scatter", "mla_q_rope_writeback",
    "mla_cache_assemble", "mla_paged_decode", "mla_decode_workspace_bytes",
    "mla_nvfp4_block_layout",
]
