"""The runtime's trace (sparkrt_c.h, "trace"; docs/trace.md): every runtime
call, and the device's work, as Chrome trace JSON that Perfetto
(ui.perfetto.dev) and chrome://tracing open.

    with sparkrt.trace.tracing("/tmp/decode.json"):
        k.launch(grid, block, args, stream=s)
        s.synchronize()

One trace runs at a time, for the whole process. SPARKRT_TRACE=<file> traces
without any of these calls, from the first device open to the process's exit.
Needs a library of C API 1.1 or newer.
"""
import contextlib
import ctypes
import os

from ._lib import Error, StatusCode, check, library
from ._structs import TraceOptions


def _lib():
    lib = library()
    minor = lib.sparkrt_c_api_version() & 0xFFFF
    if minor < 1:
        # _lib declares the trace functions only where the library has them.
        raise Error(StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION",
                    f"sparkrt.trace needs sparkrt C API 1.1, the loaded library has 1.{minor}")
    return lib


def _encode(path):
    raw = os.fsencode(path)  # str, bytes or os.PathLike; anything else a TypeError
    if b"\0" in raw:
        raise ValueError(f"trace path {path!r} contains a NUL byte")
    return raw


def start(path, device_times=True):
    """Starts writing a trace to `path` (created or truncated); with
    device_times=False, host spans only (cheaper per call).

    Raises sparkrt.Error naming the path when it cannot be opened for writing
    (a missing folder: NOT_FOUND), and FAILED_PRECONDITION while a trace runs.
    """
    raw = _encode(path)
    options = TraceOptions.new()
    options.device_times = 1 if device_times else 0
    check(_lib().sparkrt_trace_start_with_options(raw, ctypes.byref(options)))


def stop():
    """Ends the trace and closes its file.

    Raises sparkrt.Error with the first write failure the trace met (the file
    is then incomplete), and FAILED_PRECONDITION when no trace runs.
    """
    check(_lib().sparkrt_trace_stop())


def enabled():
    """Whether a trace is running (started here or by SPARKRT_TRACE)."""
    return bool(_lib().sparkrt_trace_enabled())


@contextlib.contextmanager
def range(name):  # noqa: A001 (the runtime's name for it)
    """Marks the `with` block as a region of your own ("decode step") on this
    thread's track; the runtime calls inside it nest under it. Free of effect
    when no trace runs."""
    lib = _lib()
    raw = str(name).encode()
    if b"\0" in raw:
        raise ValueError(f"range name {name!r} contains a NUL byte")
    check(lib.sparkrt_trace_range_push(raw))
    try:
        yield
    finally:
        check(lib.sparkrt_trace_range_pop())


@contextlib.contextmanager
def tracing(path, device_times=True):
    """Traces the `with` block into `path` (given to `as`): start() on entry,
    stop() on exit. stop()'s error is raised when the block raised nothing;
    otherwise the block's exception is the one that propagates."""
    start(path, device_times)
    try:
        yield path
    except BaseException:
        try:
            stop()
        except Error:
            pass  # the block's exception says more than an incomplete trace
        raise
    stop()
