"""Launch argument conversion, without a device: what each Python value
becomes against a declared parameter (the runtime's checks of the result are
in test_kernels.py)."""
import ctypes
import struct as pystruct

import numpy as np
import pytest

import sparkrt
from sparkrt import ArgKind, ParamType, _args


def param(type_, size, align=None, name="p"):
    spelling = f".b8[{size}]" if type_ == ParamType.BYTES else "." + type_.name.lower()
    return sparkrt.ParamInfo(index=0, name=name, type_name=spelling, type=type_, size=size,
                             align=align or size, offset=0)


def one(value, p):
    array, keep = _args.build_args([value], [p] if p is not None else [])
    a = array[0]
    if a.kind == ArgKind.BYTES:
        data = ctypes.string_at(a.value.bytes, a.size)
        assert a.value.bytes % max(1, min(a.align, 128)) == 0  # aligned like the struct
        return ArgKind.BYTES, data, a.align
    field = {ArgKind.PTR: "ptr", ArgKind.U32: "u32", ArgKind.I32: "i32", ArgKind.U64: "u64",
             ArgKind.I64: "i64", ArgKind.F32: "f32", ArgKind.F64: "f64"}[ArgKind(a.kind)]
    assert (a.size, a.align) == ((4, 4) if a.kind in (ArgKind.U32, ArgKind.I32, ArgKind.F32)
                                 else (8, 8))
    return ArgKind(a.kind), getattr(a.value, field)


U32, S32 = param(ParamType.U32, 4), param(ParamType.S32, 4)
U64, S64 = param(ParamType.U64, 8), param(ParamType.S64, 8)
B32, B64 = param(ParamType.B32, 4), param(ParamType.B64, 8)
F16, F32, F64 = param(ParamType.F16, 2), param(ParamType.F32, 4), param(ParamType.F64, 8)
U8, S16 = param(ParamType.U8, 1), param(ParamType.S16, 2)
STRUCT16 = param(ParamType.BYTES, 16, align=8)


@pytest.mark.parametrize("value,p,want", [
    (7, U32, (ArgKind.U32, 7)),
    (2**32 - 1, U32, (ArgKind.U32, 2**32 - 1)),
    (-1, U32, (ArgKind.I32, -1)),
    (-5, S32, (ArgKind.I32, -5)),
    (2**31, S32, (ArgKind.U32, 2**31)),
    (2**40, U64, (ArgKind.U64, 2**40)),
    (-3, U64, (ArgKind.I64, -3)),
    (-3, S64, (ArgKind.I64, -3)),
    (9, S64, (ArgKind.I64, 9)),
    (np.int64(11), U32, (ArgKind.U32, 11)),
    (True, U32, (ArgKind.U32, 1)),
    (5, B32, (ArgKind.U32, 5)),
    (5, B64, (ArgKind.U64, 5)),
    (3, F32, (ArgKind.F32, 3.0)),
    (0.5, F32, (ArgKind.F32, 0.5)),
    (np.float64(0.25), F32, (ArgKind.F32, 0.25)),
    (0.1, F64, (ArgKind.F64, 0.1)),
    (2, F64, (ArgKind.F64, 2.0)),
    (1.5, B32, (ArgKind.F32, 1.5)),
    (1.5, B64, (ArgKind.F64, 1.5)),
    # A float for an integer parameter keeps its width, so the runtime's
    # message names the kind rather than a size.
    (1.5, U32, (ArgKind.F32, 1.5)),
    (1.5, U64, (ArgKind.F64, 1.5)),
    # Past the declared parameters: the natural kinds.
    (7, None, (ArgKind.U64, 7)),
    (-7, None, (ArgKind.I64, -7)),
    (0.5, None, (ArgKind.F64, 0.5)),
    (None, U64, (ArgKind.PTR, 0)),
])
def test_plain_values_follow_the_signature(value, p, want):
    assert one(value, p) == want


def test_narrow_and_half_parameters_take_their_bytes():
    assert one(200, U8) == (ArgKind.BYTES, bytes([200]), 1)
    assert one(-1, U8) == (ArgKind.BYTES, b"\xff", 1)
    assert one(-2, S16) == (ArgKind.BYTES, pystruct.pack("<h", -2), 2)
    assert one(1.5, F16) == (ArgKind.BYTES, pystruct.pack("<e", 1.5), 2)
    assert one(np.float16(-0.25), F16) == (ArgKind.BYTES, np.float16(-0.25).tobytes(), 2)
    with pytest.raises(OverflowError, match=r"argument #0 \(p, \.u8\): 256 does not fit"):
        one(256, U8)
    with pytest.raises(OverflowError, match="does not fit in f16"):
        one(1e6, F16)


def test_out_of_range_integers_are_refused_before_the_call():
    with pytest.raises(OverflowError, match=r"argument #0 \(p, \.u32\): 4294967296 does not fit"):
        one(2**32, U32)
    with pytest.raises(OverflowError):
        one(2**64, U64)
    with pytest.raises(OverflowError):
        one(-2**63 - 1, S64)


def test_structs_take_the_declared_alignment():
    rec = np.zeros((), dtype=[("alpha", "<f4"), ("pad", "<u4"), ("n", "<u8")])
    rec["alpha"], rec["n"] = 2.5, 123
    kind, data, align = one(rec[()], STRUCT16)  # a numpy structured scalar
    assert (kind, align) == (ArgKind.BYTES, 8)
    assert data == pystruct.pack("<fIQ", 2.5, 0, 123)
    assert one(bytes(range(16)), STRUCT16) == (ArgKind.BYTES, bytes(range(16)), 8)
    assert one(sparkrt.struct(bytes(16), 4), STRUCT16) == (ArgKind.BYTES, bytes(16), 4)
    assert one(sparkrt.struct(bytes(16)), STRUCT16) == (ArgKind.BYTES, bytes(16), 8)

    class Params(ctypes.Structure):
        _fields_ = [("alpha", ctypes.c_float), ("pad", ctypes.c_uint32), ("n", ctypes.c_uint64)]

    assert one(sparkrt.struct(Params(2.5, 0, 123)), STRUCT16)[1] == data
    assert one(Params(2.5, 0, 123), STRUCT16) == (ArgKind.BYTES, data, 8)


def test_typed_wrappers_pass_their_kind_as_given():
    assert one(sparkrt.f32(3), U32) == (ArgKind.F32, 3.0)
    assert one(sparkrt.u64(3), U32) == (ArgKind.U64, 3)
    assert one(sparkrt.i32(-3), U64) == (ArgKind.I32, -3)
    assert one(sparkrt.u32(3), F32) == (ArgKind.U32, 3)
    assert one(sparkrt.i64(-2**63), None) == (ArgKind.I64, -2**63)
    assert one(sparkrt.f64(0.1), F32) == (ArgKind.F64, 0.1)
    assert one(sparkrt.ptr(0x1000), U32) == (ArgKind.PTR, 0x1000)
    with pytest.raises(OverflowError):
        sparkrt.u32(-1)
    with pytest.raises(OverflowError):
        sparkrt.i32(2**31)
    with pytest.raises(TypeError):
        sparkrt.u32(1.0)
    with pytest.raises(TypeError):
        sparkrt.f32("1")
    assert sparkrt.u32(5) == sparkrt.u32(5) != sparkrt.i32(5)


class _CaiOnly:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3}


class _DataPtrOnly:
    def __init__(self, ptr):
        self._ptr = ptr

    def data_ptr(self):
        return self._ptr


def test_pointer_like_objects():
    assert one(_CaiOnly(0xABC000), U64) == (ArgKind.PTR, 0xABC000)
    assert one(_DataPtrOnly(0xDEF000), U64) == (ArgKind.PTR, 0xDEF000)
    assert sparkrt.device_pointer(None) == 0
    assert sparkrt.device_pointer(np.uint64(2**63)) == 2**63
    with pytest.raises(OverflowError):
        sparkrt.device_pointer(-1)
    with pytest.raises(TypeError, match="is not a device pointer"):
        sparkrt.device_pointer("0x10")
    with pytest.raises(TypeError, match="is not a device pointer"):
        sparkrt.device_pointer(True)
    with pytest.raises(TypeError, match=r"argument #0 \(p, \.u64\): cannot pass a str"):
        one("text", U64)


def test_no_arguments_is_an_empty_array():
    array, keep = _args.build_args([], [U32])
    assert array is None and keep == []
