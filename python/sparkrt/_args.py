"""Kernel arguments: pointer-like objects, the typed wrappers, and plain
Python values converted by the kernel's declared signature."""
import ctypes
import enum
import struct as _struct

import numpy as np

from . import _structs


class ArgKind(enum.IntEnum):
    """SparkrtArgKind: how one argument is given."""
    PTR = 1
    U32 = 2
    I32 = 3
    U64 = 4
    I64 = 5
    F32 = 6
    F64 = 7
    BYTES = 8


class ParamType(enum.IntEnum):
    """sparkrt_param_type: a parameter's declared PTX type."""
    U8 = 1
    S8 = 2
    U16 = 3
    S16 = 4
    U32 = 5
    S32 = 6
    U64 = 7
    S64 = 8
    B8 = 9
    B16 = 10
    B32 = 11
    B64 = 12
    F16 = 13
    F32 = 14
    F64 = 15
    BYTES = 16


_RANGES = {
    ArgKind.U32: (0, 2**32 - 1),
    ArgKind.I32: (-2**31, 2**31 - 1),
    ArgKind.U64: (0, 2**64 - 1),
    ArgKind.I64: (-2**63, 2**63 - 1),
}
_VALUE_FIELD = {
    ArgKind.PTR: "ptr", ArgKind.U32: "u32", ArgKind.I32: "i32", ArgKind.U64: "u64",
    ArgKind.I64: "i64", ArgKind.F32: "f32", ArgKind.F64: "f64",
}
_SIZE = {ArgKind.PTR: 8, ArgKind.U32: 4, ArgKind.I32: 4, ArgKind.U64: 8, ArgKind.I64: 8,
         ArgKind.F32: 4, ArgKind.F64: 8}


def _fits(kind, x):
    lo, hi = _RANGES[kind]
    return lo <= x <= hi


def _integer(value, what):
    """value as a Python int; numpy integers count, bools and floats do not."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what}: expected an integer, got {type(value).__name__}")
    return int(value)


def device_pointer(obj, what="pointer"):
    """The device address an object stands for, as an int.

    Accepted: a DeviceBuffer or DeviceArray (its .ptr), an int (the address
    itself; 0 is null), None (null), anything with a data_ptr() method
    (torch tensors), or anything with __cuda_array_interface__ (its
    data[0]: CuPy, Numba, PyTorch).
    """
    if obj is None:
        return 0
    ptr = getattr(obj, "_sparkrt_device_ptr", None)
    if ptr is not None:
        return ptr()
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, (bool, np.bool_)):
        x = int(obj)
        if not 0 <= x < 2**64:
            raise OverflowError(f"{what}: {x} is not a 64-bit device address")
        return x
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    raise TypeError(
        f"{what}: {type(obj).__name__} is not a device pointer (give a DeviceBuffer, a "
        "DeviceArray, an int, None, or an object with data_ptr() or __cuda_array_interface__)")


def _is_pointer_like(obj):
    return (hasattr(obj, "_sparkrt_device_ptr") or callable(getattr(obj, "data_ptr", None))
            or hasattr(obj, "__cuda_array_interface__"))


class TypedArg:
    """An argument whose kind is given explicitly: passed as is, never
    converted, so a kind the parameter does not take is refused by the
    runtime's signature check with its own message."""
    __slots__ = ("value",)
    kind = None

    def __init__(self, value):
        what = type(self).__name__
        if self.kind in (ArgKind.F32, ArgKind.F64):
            if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(
                    value, (bool, np.bool_)):
                raise TypeError(f"{what}: expected a number, got {type(value).__name__}")
            self.value = float(value)
        else:
            x = _integer(value, what)
            if not _fits(self.kind, x):
                raise OverflowError(f"{what}: {x} is out of range")
            self.value = x

    def _fill(self, arg, param, keep):
        arg.kind = self.kind
        arg.size = _SIZE[self.kind]
        arg.align = _SIZE[self.kind]
        setattr(arg.value, _VALUE_FIELD[self.kind], self.value)

    def __repr__(self):
        return f"sparkrt.{type(self).__name__}({self.value!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.value == other.value

    def __hash__(self):
        return hash((type(self), self.value))


class u32(TypedArg):
    """A uint32_t argument (kind U32)."""
    __slots__ = ()
    kind = ArgKind.U32


class i32(TypedArg):
    """An int32_t argument (kind I32)."""
    __slots__ = ()
    kind = ArgKind.I32


class u64(TypedArg):
    """A uint64_t argument (kind U64)."""
    __slots__ = ()
    kind = ArgKind.U64


class i64(TypedArg):
    """An int64_t argument (kind I64)."""
    __slots__ = ()
    kind = ArgKind.I64


class f32(TypedArg):
    """A float argument (kind F32; the value is rounded to single precision)."""
    __slots__ = ()
    kind = ArgKind.F32


class f64(TypedArg):
    """A double argument (kind F64)."""
    __slots__ = ()
    kind = ArgKind.F64


class ptr(TypedArg):
    """A device pointer argument (kind PTR) from anything device_pointer()
    takes: a DeviceBuffer or DeviceArray, an int, None, a torch tensor, an
    object with __cuda_array_interface__."""
    __slots__ = ()
    kind = ArgKind.PTR

    def __init__(self, obj):  # pylint: disable=super-init-not-called
        self.value = device_pointer(obj, "sparkrt.ptr")


def _as_bytes(data, what):
    if isinstance(data, (np.ndarray, np.generic)):
        return np.ascontiguousarray(data).tobytes()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, ctypes.Structure) or isinstance(data, ctypes.Array):
        return bytes(memoryview(data).cast("B"))
    raise TypeError(f"{what}: expected bytes, a numpy array or scalar, or a ctypes structure; "
                    f"got {type(data).__name__}")


class struct(TypedArg):
    """A struct passed by value (kind BYTES): `data` is bytes, a numpy
    structured scalar or array, or a ctypes Structure; `align` is its
    alignment, which decides its offset in the parameter buffer (None: the
    declared parameter's alignment)."""
    __slots__ = ("align",)
    kind = ArgKind.BYTES

    def __init__(self, data, align=None):  # pylint: disable=super-init-not-called
        self.value = _as_bytes(data, "sparkrt.struct")
        if align is not None:
            align = _integer(align, "sparkrt.struct align")
            if not 0 <= align < 2**32:
                raise OverflowError(f"sparkrt.struct: align {align} is out of range")
        self.align = align

    def _fill(self, arg, param, keep):
        align = self.align
        if align is None:
            align = param.align if param is not None else 1
        _fill_bytes(arg, self.value, align, keep)

    def __repr__(self):
        return f"sparkrt.struct({self.value!r}, align={self.align!r})"

    def __eq__(self, other):
        return type(self) is type(other) and (self.value, self.align) == (other.value,
                                                                           other.align)

    def __hash__(self):
        return hash((type(self), self.value, self.align))


def _fill_scalar(arg, kind, value):
    arg.kind = kind
    arg.size = _SIZE[kind]
    arg.align = _SIZE[kind]
    setattr(arg.value, _VALUE_FIELD[kind], value)


def _fill_bytes(arg, data, align, keep):
    # The runtime copies the bytes during the launch call; the buffer is kept
    # alive until then, and aligned as the struct would be in C.
    host_align = align if 0 < align <= 128 and align & (align - 1) == 0 else 1
    buf = ctypes.create_string_buffer(len(data) + host_align)
    addr = ctypes.addressof(buf)
    addr += -addr % host_align
    ctypes.memmove(addr, data, len(data))
    keep.append(buf)
    arg.kind = ArgKind.BYTES
    arg.size = len(data)
    arg.align = align
    arg.value.bytes = addr


_INT_BYTES = {  # 1- and 2-byte parameters take BYTES of their size
    ParamType.U8: ("<B", "<b"), ParamType.S8: ("<b", "<B"), ParamType.B8: ("<B", "<b"),
    ParamType.U16: ("<H", "<h"), ParamType.S16: ("<h", "<H"), ParamType.B16: ("<H", "<h"),
}


def _where(index, param):
    if param is None:
        return f"argument #{index}"
    return f"argument #{index} ({param.name}, {param.type_name})"


def _fill_int(arg, x, param, index, keep):
    t = param.type if param is not None else None
    if t in (ParamType.F32, ParamType.F64):
        _fill_scalar(arg, ArgKind.F32 if t == ParamType.F32 else ArgKind.F64, float(x))
        return
    if t == ParamType.F16:
        _fill_float(arg, float(x), param, index, keep)
        return
    if t in _INT_BYTES:
        for fmt in _INT_BYTES[t]:
            try:
                _fill_bytes(arg, _struct.pack(fmt, x), param.align, keep)
                return
            except _struct.error:
                pass
        raise OverflowError(f"{_where(index, param)}: {x} does not fit")
    if t in (ParamType.U32, ParamType.B32):
        order = (ArgKind.U32, ArgKind.I32)
    elif t == ParamType.S32:
        order = (ArgKind.I32, ArgKind.U32)
    elif t == ParamType.S64:
        order = (ArgKind.I64, ArgKind.U64)
    else:  # 64-bit integers, and the natural kind where nothing narrower is declared
        order = (ArgKind.U64, ArgKind.I64)
    for kind in order:
        if _fits(kind, x):
            _fill_scalar(arg, kind, x)
            return
    raise OverflowError(f"{_where(index, param)}: {x} does not fit")


def _fill_float(arg, x, param, index, keep):
    t = param.type if param is not None else None
    if t == ParamType.F16:
        try:
            data = _struct.pack("<e", x)
        except OverflowError:
            raise OverflowError(f"{_where(index, param)}: {x} does not fit in f16") from None
        _fill_bytes(arg, data, param.align, keep)
    elif param is not None and param.size == 4:
        _fill_scalar(arg, ArgKind.F32, x)
    else:
        _fill_scalar(arg, ArgKind.F64, x)


def fill_arg(arg, value, param, index, keep):
    """Fills one sparkrt_arg from `value` for the declared `param` (None past
    the declared parameters). Buffers the runtime reads are appended to
    `keep`."""
    if isinstance(value, TypedArg):
        value._fill(arg, param, keep)
    elif isinstance(value, (int, np.integer, np.bool_)):  # bools included: 0 or 1
        _fill_int(arg, int(value), param, index, keep)
    elif isinstance(value, (float, np.floating)):
        _fill_float(arg, float(value), param, index, keep)
    elif isinstance(value, (bytes, bytearray, memoryview, np.ndarray, np.void,
                            ctypes.Structure)):
        _fill_bytes(arg, _as_bytes(value, _where(index, param)),
                    param.align if param is not None else 1, keep)
    elif value is None or _is_pointer_like(value):
        _fill_scalar(arg, ArgKind.PTR, device_pointer(value, _where(index, param)))
    else:
        raise TypeError(
            f"{_where(index, param)}: cannot pass a {type(value).__name__} (give a number, a "
            "device pointer, bytes, or one of sparkrt.u32/i32/u64/i64/f32/f64/ptr/struct)")


def build_args(values, params):
    """A ctypes array of sparkrt_arg for `values` against the declared
    `params`, and the buffers that must outlive the call."""
    values = list(values)
    keep = []
    if not values:
        return None, keep
    array = (_structs.Arg * len(values))()
    for i, v in enumerate(values):
        fill_arg(array[i], v, params[i] if i < len(params) else None, i, keep)
    return array, keep
