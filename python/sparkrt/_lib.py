"""Finding and loading libsparkrt_c, its function prototypes, and the errors
its statuses become.

The library is loaded on first use, not at import, so `import sparkrt` works
(and the bf16 helpers do) on a machine without it; the first call that needs
it raises LibraryError saying where it looked.
"""
import ctypes
import enum
import os
import threading
from ctypes import (POINTER, c_char_p, c_float, c_int, c_int32, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)
from pathlib import Path

SONAME = "libsparkrt_c.so.0"
API_MAJOR = 1  # the SPARKRT_C_API_MAJOR this package is written against

ENV_LIBRARY = "SPARKRT_C_LIBRARY"


class LibraryError(OSError):
    """libsparkrt_c could not be found or loaded, or is of another C API major."""


class StatusCode(enum.IntEnum):
    """absl::StatusCode values: the codes of sparkrt.Error."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class Error(Exception):
    """A failed sparkrt call: the runtime's status, freed once copied here.

    Attributes:
        code: the absl::StatusCode (a StatusCode where it is one of them).
        code_name: its name, e.g. "INVALID_ARGUMENT".
        message: the runtime's message (also str(error)): what failed, where,
            and what to do.
    """

    def __init__(self, code, code_name, message):
        super().__init__(message)
        try:
            self.code = StatusCode(code)
        except ValueError:
            self.code = code
        self.code_name = code_name
        self.message = message

    def __reduce__(self):
        return (type(self), (int(self.code), self.code_name, self.message))


# Handles are opaque pointers; statuses are taken as integers (None for NULL)
# so that a status is freed exactly once, by check().
_STATUS = c_void_p
_DEV = c_void_p
_KERNEL = c_void_p
_COMM = c_void_p
_P = POINTER

GROUP_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p)

# name: (restype, argtypes). Struct pointers are c_void_p (callers pass
# ctypes.byref), which keeps this table independent of _structs.
_PROTOTYPES = {
    "sparkrt_c_api_version": (c_uint32, []),
    "sparkrt_version_string": (c_char_p, []),
    "sparkrt_status_code": (c_int32, [_STATUS]),
    "sparkrt_status_message": (c_char_p, [_STATUS]),
    "sparkrt_status_free": (None, [_STATUS]),
    "sparkrt_code_name": (c_char_p, [c_int32]),
    "sparkrt_status_new": (_STATUS, [c_int32, c_char_p]),
    # devices
    "sparkrt_device_open": (_STATUS, [c_void_p, _P(_DEV)]),
    "sparkrt_device_close": (_STATUS, [_DEV]),
    "sparkrt_device_properties_get": (_STATUS, [_DEV, c_void_p]),
    "sparkrt_device_extension": (c_void_p, [_DEV, c_char_p]),
    "sparkrt_device_native_handle": (c_void_p, [_DEV]),
    # memory
    "sparkrt_alloc": (_STATUS, [_DEV, c_size_t, _P(c_uint64)]),
    "sparkrt_free": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_alloc_host": (_STATUS, [_DEV, c_size_t, _P(c_void_p)]),
    "sparkrt_free_host": (_STATUS, [_DEV, c_void_p]),
    "sparkrt_memset": (_STATUS, [_DEV, c_uint64, c_uint8, c_size_t]),
    "sparkrt_memset_async": (_STATUS, [_DEV, c_uint64, c_uint8, c_size_t, c_uint64]),
    "sparkrt_copy_h2d": (_STATUS, [_DEV, c_void_p, c_uint64, c_size_t]),
    "sparkrt_copy_d2h": (_STATUS, [_DEV, c_uint64, c_void_p, c_size_t]),
    "sparkrt_copy_d2d": (_STATUS, [_DEV, c_uint64, c_uint64, c_size_t]),
    "sparkrt_copy_h2d_async": (_STATUS, [_DEV, c_void_p, c_uint64, c_size_t, c_uint64]),
    "sparkrt_copy_d2h_async": (_STATUS, [_DEV, c_uint64, c_void_p, c_size_t, c_uint64]),
    "sparkrt_copy_d2d_async": (_STATUS, [_DEV, c_uint64, c_uint64, c_size_t, c_uint64]),
    # streams and events
    "sparkrt_stream_create": (_STATUS, [_DEV, _P(c_uint64)]),
    "sparkrt_stream_destroy": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_stream_synchronize": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_event_create": (_STATUS, [_DEV, _P(c_uint64)]),
    "sparkrt_event_destroy": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_event_record": (_STATUS, [_DEV, c_uint64, c_uint64]),
    "sparkrt_event_synchronize": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_stream_wait_event": (_STATUS, [_DEV, c_uint64, c_uint64]),
    "sparkrt_event_elapsed_ms": (_STATUS, [_DEV, c_uint64, c_uint64, _P(c_float)]),
    # kernels and launches
    "sparkrt_kernel_get": (_STATUS, [_DEV, c_char_p, c_char_p, _P(_KERNEL)]),
    "sparkrt_kernel_info_get": (_STATUS, [_KERNEL, c_void_p]),
    "sparkrt_kernel_param": (_STATUS, [_KERNEL, c_uint32, c_void_p]),
    "sparkrt_launch": (_STATUS, [_KERNEL, c_void_p, c_void_p, c_uint32]),
    # graphs
    "sparkrt_graph_begin_capture": (_STATUS, [_DEV, c_uint64]),
    "sparkrt_graph_end_capture": (_STATUS, [_DEV, c_uint64, _P(c_uint64), _P(c_uint64)]),
    "sparkrt_graph_launch": (_STATUS, [_DEV, c_uint64, c_uint64]),
    "sparkrt_graph_destroy": (_STATUS, [_DEV, c_uint64]),
    # communicators
    "sparkrt_comm_library": (_STATUS, [_DEV, _P(c_char_p)]),
    "sparkrt_comm_create_all": (_STATUS, [_P(_DEV), c_int32, _P(_COMM)]),
    "sparkrt_comm_unique_id": (_STATUS, [_DEV, c_void_p]),
    "sparkrt_comm_create_rank": (_STATUS, [_DEV, c_int32, c_int32, c_void_p, _P(_COMM)]),
    "sparkrt_comm_destroy": (_STATUS, [_COMM]),
    "sparkrt_comm_abort": (_STATUS, [_COMM]),
    "sparkrt_comm_status": (_STATUS, [_COMM]),
    "sparkrt_comm_rank": (c_int32, [_COMM]),
    "sparkrt_comm_size": (c_int32, [_COMM]),
    "sparkrt_comm_group": (_STATUS, [_DEV, GROUP_FN, c_void_p]),
    "sparkrt_all_reduce": (_STATUS, [_COMM, c_uint64, c_uint64, c_size_t, c_int32, c_int32,
                                     c_uint64]),
    "sparkrt_all_gather": (_STATUS, [_COMM, c_uint64, c_uint64, c_size_t, c_int32, c_uint64]),
    "sparkrt_reduce_scatter": (_STATUS, [_COMM, c_uint64, c_uint64, c_size_t, c_int32, c_int32,
                                         c_uint64]),
    "sparkrt_broadcast": (_STATUS, [_COMM, c_uint64, c_uint64, c_size_t, c_int32, c_int32,
                                    c_uint64]),
    "sparkrt_send": (_STATUS, [_COMM, c_uint64, c_size_t, c_int32, c_int32, c_uint64]),
    "sparkrt_recv": (_STATUS, [_COMM, c_uint64, c_size_t, c_int32, c_int32, c_uint64]),
    "sparkrt_data_type_size": (c_size_t, [c_int32]),
    # ops: every one takes (device, const args*, stream)
    "sparkrt_paged_decode_workspace_bytes": (c_uint64, [c_uint32, c_uint32, c_uint32, c_uint32]),
    "sparkrt_turbo_cache_layout_get": (_STATUS, [c_uint32, c_uint32, c_uint32, c_uint32,
                                                 c_void_p]),
    "sparkrt_mla_decode_workspace_bytes": (c_uint64, [c_uint32, c_uint32, c_uint32, c_uint32]),
    "sparkrt_mla_nvfp4_block_layout_get": (_STATUS, [c_uint32, c_uint32, c_uint32, c_void_p]),
}
OP_FUNCTIONS = (
    "sparkrt_fill_slots_from_block_table",
    "sparkrt_reshape_and_cache",
    "sparkrt_reshape_and_cache_flash_v_only",
    "sparkrt_reshape_and_cache_fp8",
    "sparkrt_fused_k_norm_rope_cache_write",
    "sparkrt_paged_decode_attn",
    "sparkrt_reshape_and_cache_turbo",
    "sparkrt_hadamard_transform_bf16",
    "sparkrt_paged_decode_attn_turbo",
    "sparkrt_mla_batched_gemv",
    "sparkrt_mla_q_rope_scatter",
    "sparkrt_mla_q_rope_writeback",
    "sparkrt_mla_cache_assemble",
    "sparkrt_mla_paged_decode",
)
for _name in OP_FUNCTIONS:
    _PROTOTYPES[_name] = (_STATUS, [_DEV, c_void_p, c_uint64])

# Added in C API 1.1: declared only where the library is 1.1 or newer, so a
# 1.0 library still loads; their callers refuse to run on it (sparkrt.trace).
_PROTOTYPES_1_1 = {
    "sparkrt_trace_start": (_STATUS, [c_char_p]),
    "sparkrt_trace_start_with_options": (_STATUS, [c_char_p, c_void_p]),
    "sparkrt_trace_stop": (_STATUS, []),
    "sparkrt_trace_enabled": (c_int, []),
    "sparkrt_trace_range_push": (_STATUS, [c_char_p]),
    "sparkrt_trace_range_pop": (_STATUS, []),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    """(path or soname, is_file) pairs to try, in order."""
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return [(env, True)]
    found = []
    here = Path(__file__).resolve().parent
    # An installed package lives in <prefix>/<datadir>/sparkrt/python/sparkrt.
    installed = here.parent.name == "python" and here.parent.parent.name == "sparkrt"
    if installed:
        try:
            from . import _install_paths  # written at install time
            found.append((os.path.normpath(here / _install_paths.LIBDIR_FROM_PACKAGE / SONAME),
                          True))
        except ImportError:
            pass
        prefix = here.parents[3]
        for libdir in ("lib", "lib64"):
            path = str(prefix / libdir / SONAME)
            if (path, True) not in found:
                found.append((path, True))
    found.append((SONAME, False))
    return found


def _load():
    tried = []
    for name, is_file in _candidates():
        if is_file and not os.path.isfile(name):
            tried.append(f"{name} (no such file)")
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            where = name if is_file else f"{name} through the dynamic loader"
            tried.append(f"{where} ({e})")
            continue
        return _check_version(lib, name)
    raise LibraryError(
        "libsparkrt_c could not be loaded; tried: " + "; ".join(tried) +
        f". Set {ENV_LIBRARY} to the library's path (e.g. <build>/lib/{SONAME} or "
        f"<prefix>/lib/{SONAME}).")


def _check_version(lib, name):
    try:
        fn = lib.sparkrt_c_api_version
    except AttributeError:
        raise LibraryError(f"{name} is not the sparkrt C library (no sparkrt_c_api_version)") \
            from None
    fn.restype = c_uint32
    fn.argtypes = []
    version = fn()
    major, minor = version >> 16, version & 0xFFFF
    if major != API_MAJOR:
        raise LibraryError(
            f"{name} has sparkrt C API {major}.{minor}, but this package needs "
            f"{API_MAJOR}.x: use the Python package of that library's release, or point "
            f"{ENV_LIBRARY} at a library of C API {API_MAJOR}.x")
    prototypes = dict(_PROTOTYPES)
    if minor >= 1:
        prototypes.update(_PROTOTYPES_1_1)
    for fname, (restype, argtypes) in prototypes.items():
        try:
            f = getattr(lib, fname)
        except AttributeError:
            raise LibraryError(f"{name} (C API {major}.{minor}) lacks {fname}") from None
        f.restype = restype
        f.argtypes = argtypes
    global _lib_path
    _lib_path = name
    return lib


def library():
    """The loaded libsparkrt_c (a ctypes.CDLL), loading it on first use.

    Looks at $SPARKRT_C_LIBRARY (a path) when set; else, for an installed
    package, <prefix>/lib (or lib64)/libsparkrt_c.so.0; else asks the dynamic
    loader for libsparkrt_c.so.0. Raises LibraryError naming every place tried,
    or when the library's C API major is not the one this package is written
    for.
    """
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def library_path():
    """The path (or soname) the library was loaded from."""
    library()
    return _lib_path


def error_from_status(status):
    """Converts a non-NULL sparkrt_status* into an Error, freeing the status."""
    lib = library()
    code = lib.sparkrt_status_code(status)
    message = (lib.sparkrt_status_message(status) or b"").decode("utf-8", "replace")
    name = (lib.sparkrt_code_name(code) or b"UNKNOWN").decode("ascii", "replace")
    lib.sparkrt_status_free(status)
    return Error(code, name, message)


def check(status):
    """Raises Error for a non-NULL status (freeing it); NULL is success."""
    if status:
        raise error_from_status(status)
