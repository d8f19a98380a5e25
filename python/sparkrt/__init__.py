"""sparkrt for Python: the sparkrt C API (sparkrt_c.h, libsparkrt_c.so) over
ctypes and numpy.

    import numpy as np, sparkrt

    with sparkrt.Device.open("cpu") as dev:           # or None: $SPARKRT_BACKEND
        a = dev.from_numpy(np.arange(1000, dtype=np.float32))
        b = dev.from_numpy(np.ones(1000, dtype=np.float32))
        c = dev.empty(1000, np.float32)
        k = dev.kernel("vector_ops", "vector_add_f32")
        k.launch(grid=(1000 + 255) // 256, block=256, args=[a, b, c, 1000])
        dev.synchronize()
        print(c.to_numpy()[:4])

Modules: sparkrt.ops (the KV-cache, paged-attention and TurboQuant ops),
sparkrt.comm (communicators), sparkrt.testing (the mock's records),
sparkrt.trace (the runtime's trace as Chrome trace JSON). Every
failed call raises sparkrt.Error carrying the runtime's code and message.
libsparkrt_c is found through $SPARKRT_C_LIBRARY, the install tree, or the
dynamic loader (sparkrt.library_path() says which).
"""
from ._args import ArgKind, ParamType, TypedArg, device_pointer, f32, f64, i32, i64, ptr, struct
from ._args import u32, u64
from ._lib import API_MAJOR, Error, LibraryError, StatusCode, library, library_path
from ._numeric import bf16_from_f32, bf16_to_f32, round_bf16
from .device import (Capture, Device, DeviceArray, DeviceBuffer, DeviceProperties, Event, Graph,
                     Kernel, KernelInfo, ParamInfo, Stream)
from . import comm, ops, testing, trace  # noqa: E402  (sub-modules, after the names they use)


def c_api_version():
    """(major, minor) of the loaded library's C API."""
    v = library().sparkrt_c_api_version()
    return v >> 16, v & 0xFFFF


def version():
    """The loaded library's release, e.g. "0.1.0"."""
    return library().sparkrt_version_string().decode()


__all__ = [
    "ArgKind", "Capture", "Device", "DeviceArray", "DeviceBuffer", "DeviceProperties", "Error",
    "Event", "Graph", "Kernel", "KernelInfo", "LibraryError", "ParamInfo", "ParamType",
    "Stream", "StatusCode", "TypedArg", "API_MAJOR", "bf16_from_f32", "bf16_to_f32",
    "c_api_version", "comm", "device_pointer", "f32", "f64", "i32", "i64", "library",
    "library_path", "ops", "ptr", "round_bf16", "struct", "testing", "trace", "u32", "u64",
    "version",
]
