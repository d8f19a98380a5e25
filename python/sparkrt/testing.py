"""Inspecting the recording mock device from tests, through its extension
table "sparkrt.mock.v1" (sparkrt/extensions/mock.h)."""
import ctypes
from ctypes import POINTER, byref, c_char_p, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from typing import NamedTuple, Tuple

from ._lib import Error, library
from .device import Device

MOCK_EXTENSION_NAME = "sparkrt.mock.v1"

_ErrorCodeFn = ctypes.CFUNCTYPE(c_int32, c_void_p)
_ErrorMessageFn = ctypes.CFUNCTYPE(None, c_void_p, POINTER(c_void_p), POINTER(c_size_t))
_ErrorDestroyFn = ctypes.CFUNCTYPE(None, c_void_p)
_ResetFn = ctypes.CFUNCTYPE(c_void_p, c_void_p)
_CountFn = ctypes.CFUNCTYPE(c_void_p, c_void_p, POINTER(c_uint64))


class _MockLaunch(ctypes.Structure):
    """SparkrtMockLaunch."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("module", c_char_p),
        ("entry", c_char_p),
        ("kernel_id", c_uint64),
        ("grid", c_uint32 * 3),
        ("block", c_uint32 * 3),
        ("shared_memory_bytes", c_uint32),
        ("stream", c_uint64),
        ("num_args", c_uint32),
        ("sequence", c_uint64),
    ]


_GetLaunchFn = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_uint64, POINTER(_MockLaunch))


class _MockLaunchAttributes(ctypes.Structure):
    """SparkrtMockLaunchAttributes."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("flags", c_uint32),
        ("cluster", c_uint32 * 3),
    ]


_GetLaunchAttributesFn = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_uint64,
                                          POINTER(_MockLaunchAttributes))


class _MockExtension(ctypes.Structure):
    """SparkrtMockExtension up to get_launch_attributes; the entries not
    called here are plain pointers of the same size."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("error_code", _ErrorCodeFn),
        ("error_message", _ErrorMessageFn),
        ("error_destroy", _ErrorDestroyFn),
        ("reset", _ResetFn),
        ("get_counters", c_void_p),
        ("get_stream_counters", c_void_p),
        ("lookup_count", c_void_p),
        ("get_lookup", c_void_p),
        ("launch_count", _CountFn),
        ("get_launch", _GetLaunchFn),
        ("get_launch_arg", c_void_p),
        ("pointer_info", c_void_p),
        ("deny_lookup", c_void_p),
        ("cap_memory", c_void_p),
        ("fail_launch", c_void_p),
        ("clear_faults", c_void_p),
        ("set_recording", c_void_p),
        ("set_log_path", c_void_p),
        ("collective_count", c_void_p),
        ("get_collective", c_void_p),
        ("get_launch_attributes", _GetLaunchAttributesFn),
    ]


def _api_size(cls):
    name, ctype = cls._fields_[-1]
    return getattr(cls, name).offset + ctypes.sizeof(ctype)


class MockLaunch(NamedTuple):
    """One recorded launch, with its launch attributes (Kernel.launch's
    dependent and cluster; (0, 0, 0): no cluster)."""
    module: str
    entry: str
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    dependent: bool = False
    cluster: Tuple[int, int, int] = (0, 0, 0)


def _table(dev: Device):
    addr = dev.extension(MOCK_EXTENSION_NAME)
    if addr is None:
        raise ValueError(f"{dev!r} is not a mock device (no {MOCK_EXTENSION_NAME} table)")
    table = _MockExtension.from_address(addr)
    if table.struct_size < _api_size(_MockExtension):
        raise ValueError(f"the mock's {MOCK_EXTENSION_NAME} table is too old "
                         f"({table.struct_size} bytes)")
    return table, dev.native_handle


def _check(table, err):
    if not err:
        return
    code = table.error_code(err)
    text, size = c_void_p(), c_size_t()
    table.error_message(err, byref(text), byref(size))
    message = ctypes.string_at(text.value, size.value).decode("utf-8", "replace") \
        if text.value else ""
    table.error_destroy(err)
    raise Error(code, library().sparkrt_code_name(code).decode(), message)


def mock_launch_count(dev: Device) -> int:
    """Launches the mock device has recorded since it opened or was reset."""
    table, native = _table(dev)
    n = c_uint64()
    _check(table, table.launch_count(native, byref(n)))
    return n.value


def mock_launches(dev: Device):
    """The launches the mock device recorded, in submission order, as
    MockLaunch(module, entry, grid, block, dependent, cluster) tuples."""
    table, native = _table(dev)
    n = c_uint64()
    _check(table, table.launch_count(native, byref(n)))
    out = []
    for i in range(n.value):
        rec = _MockLaunch()
        rec.struct_size = _api_size(_MockLaunch)
        _check(table, table.get_launch(native, i, byref(rec)))
        attrs = _MockLaunchAttributes()
        attrs.struct_size = _api_size(_MockLaunchAttributes)
        _check(table, table.get_launch_attributes(native, i, byref(attrs)))
        out.append(MockLaunch(rec.module.decode(), rec.entry.decode(), tuple(rec.grid),
                              tuple(rec.block), bool(attrs.flags & 1), tuple(attrs.cluster)))
    return out


def mock_reset(dev: Device):
    """Clears the mock device's records, counters and injected faults."""
    table, native = _table(dev)
    _check(table, table.reset(native))
