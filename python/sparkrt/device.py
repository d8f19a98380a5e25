"""Devices and what lives on them: memory, streams, events, kernels, graphs.

Ownership follows sparkrt_c.h: everything obtained from a Device is valid
until the device closes, and close() frees it. Device memory is also freed
when its DeviceBuffer (or DeviceArray) is freed, leaves its `with` block or is
garbage collected; streams, events and graphs live until destroy() or the
close. Using an object of a closed device raises ValueError.
"""
import ctypes
import dataclasses
import math
from ctypes import byref, c_float, c_uint64, c_void_p
from typing import Optional, Tuple

import numpy as np

from . import _args, _structs
from ._lib import Error, StatusCode, check, library


def stream_handle(stream):
    """The SparkrtStream of `stream`: a Stream, an int handle, or None (0: the
    device's default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, Stream):
        return stream.handle
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, (bool, np.bool_)):
        x = int(stream)
        if not 0 <= x < 2**64:
            raise OverflowError(f"stream {x} is not a stream handle")
        return x
    raise TypeError(f"stream: expected a sparkrt.Stream, an int or None, got "
                    f"{type(stream).__name__}")


def _c_api_minor():
    return library().sparkrt_c_api_version() & 0xFFFF


def _dim3(v, what):
    if isinstance(v, (int, np.integer)):
        v = (v,)
    v = tuple(int(x) for x in v)
    if not 1 <= len(v) <= 3:
        raise ValueError(f"{what}: expected 1 to 3 dimensions, got {len(v)}")
    for x in v:
        if not 0 <= x < 2**32:
            raise OverflowError(f"{what}: dimension {x} is out of range")
    return v + (1,) * (3 - len(v))


def _u8(value, what):
    value = _args._integer(value, what)
    if not 0 <= value <= 255:
        raise OverflowError(f"{what}: {value} is not a byte value (0..255)")
    return value


def _size(value, what):
    value = _args._integer(value, what)
    if value < 0:
        raise ValueError(f"{what}: {value} is negative")
    return value


def _extent(obj):
    """Bytes known to lie behind a device pointer-like object, or None."""
    if isinstance(obj, (DeviceBuffer, DeviceArray)):
        return obj.nbytes
    return None


def _host(obj, writable, what, contiguous_copy_ok):
    """(address, nbytes, keep-alive object) of host memory given as a numpy
    array or a bytes-like object."""
    if isinstance(obj, np.ndarray):
        if writable and not obj.flags.writeable:
            raise ValueError(f"{what}: the host array is read-only")
        if not obj.flags.c_contiguous:
            if writable or not contiguous_copy_ok:
                raise ValueError(f"{what}: the host array must be C-contiguous")
            obj = np.ascontiguousarray(obj)
        return obj.ctypes.data, obj.nbytes, obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if writable and isinstance(obj, bytes):
            raise ValueError(f"{what}: bytes are read-only; give a bytearray or a numpy array")
        arr = np.frombuffer(obj, dtype=np.uint8)
        return arr.ctypes.data, arr.nbytes, arr
    raise TypeError(f"{what}: expected a numpy array or a bytes-like object, got "
                    f"{type(obj).__name__}")


def _bytes_to_copy(nbytes, what, *extents):
    known = [e for e in extents if e is not None]
    if nbytes is None:
        if not known:
            raise TypeError(f"{what}: nbytes is required when neither side has a known size")
        nbytes = known[0]
    nbytes = _size(nbytes, f"{what} nbytes")
    for e in known:
        if nbytes > e:
            raise ValueError(f"{what}: {nbytes} bytes do not fit in {e}")
    return nbytes


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What sparkrt_device_properties_get reports (field meanings in
    sparkrt_c.h)."""
    backend: str
    plugin_path: str
    plugin_version: str
    name: str
    architecture: str
    driver: str
    index: int
    multiprocessor_count: int
    total_memory: int
    warp_size: int
    max_threads_per_block: int
    max_block_dim: Tuple[int, int, int]
    max_grid_dim: Tuple[int, int, int]
    max_shared_memory_per_block: int
    max_shared_memory_per_block_optin: int
    compute_capability_major: int
    compute_capability_minor: int
    accepts_ptx: bool
    accepts_cubin: bool
    accepts_spirv: bool
    accepts_signatures: bool
    emulated: bool
    has_graphs: bool
    has_collectives: bool
    supports_dependent_launch: bool  # a dependent launch can overlap the previous kernel
    supports_clusters: bool  # launches take a thread-block cluster
    max_cluster_size: int  # blocks per cluster; 0 without clusters


def _from_struct(s):
    """The fields of a filled ctypes struct as Python values."""
    out = {}
    for name, ctype in s._fields_:
        if name == "struct_size":
            continue
        v = getattr(s, name)
        if ctype is ctypes.c_char_p:
            v = (v or b"").decode("utf-8", "replace")
        elif ctype is ctypes.c_uint8:
            v = bool(v)
        elif isinstance(v, ctypes.Array):
            v = tuple(v)
        out[name] = v
    return out


class Device:
    """One opened device; create with Device.open().

    A context manager: `with sparkrt.Device.open("cpu") as dev:` closes it at
    the end. Calls may come from several threads, but not concurrently with
    close().
    """

    def __init__(self, handle):
        """Wraps a sparkrt_device* handle; use Device.open()."""
        self._handle = handle
        self._properties = None
        self._kernels = {}
        self._comms = set()  # destroyed before the device closes

    @classmethod
    def open(cls, backend: Optional[str] = None, index: int = -1) -> "Device":
        """Opens a device.

        backend: "cuda", "vulkan", "cpu", "mock", a path to a plugin file, or
            "auto"; None or "": $SPARKRT_BACKEND, else "auto" (which never picks
            the mock).
        index: the device index; -1: $SPARKRT_DEVICE, else 0.
        Raises sparkrt.Error with the runtime's message when it fails.
        """
        lib = library()
        opts = _structs.OpenOptions.new()
        opts.backend = backend.encode() if backend else None
        opts.device_index = index
        handle = c_void_p()
        check(lib.sparkrt_device_open(byref(opts), byref(handle)))
        return cls(handle.value)

    @property
    def _h(self):
        if self._handle is None:
            raise ValueError("the device is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._handle is None

    def close(self):
        """Destroys the communicators made on this device, then closes it (its
        modules, memory, streams, events and graphs). The device is closed even
        when an error is raised (the first failure of the shutdown). A second
        call does nothing."""
        if self._handle is None:
            return
        first_error = None
        for comm in list(self._comms):
            try:
                comm.destroy()
            except Error as e:
                first_error = first_error or e
        handle, self._handle = self._handle, None
        self._kernels.clear()
        check(library().sparkrt_device_close(handle))
        if first_error is not None:
            raise first_error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass  # nothing can report it here

    def __repr__(self):
        if self._handle is None:
            return "<sparkrt.Device closed>"
        p = self.properties
        return f"<sparkrt.Device {p.backend}:{p.index} {p.name!r}>"

    @property
    def properties(self) -> DeviceProperties:
        """The device's DeviceProperties (fetched once)."""
        if self._properties is None:
            out = _structs.DeviceProperties.new()
            check(library().sparkrt_device_properties_get(self._h, byref(out)))
            self._properties = DeviceProperties(**_from_struct(out))
        return self._properties

    @property
    def backend(self) -> str:
        """The plugin's name: "cuda", "cpu", "mock", ..."""
        return self.properties.backend

    @property
    def native_handle(self) -> int:
        """The plugin's SparkrtDevice* (what extension tables take), as an int."""
        return library().sparkrt_device_native_handle(self._h) or 0

    def extension(self, name: str) -> Optional[int]:
        """The address of the plugin's extension table `name` (e.g.
        "sparkrt.mock.v1"), or None where the plugin has none."""
        return library().sparkrt_device_extension(self._h, name.encode()) or None

    # ---- memory ---------------------------------------------------------

    def alloc(self, nbytes: int) -> "DeviceBuffer":
        """Allocates `nbytes` (> 0) of device memory, at least 256-byte
        aligned, uninitialised."""
        nbytes = _size(nbytes, "alloc")
        out = c_uint64()
        check(library().sparkrt_alloc(self._h, nbytes, byref(out)))
        return DeviceBuffer(self, out.value, nbytes)

    def empty(self, shape, dtype=np.float32) -> "DeviceArray":
        """An uninitialised DeviceArray of `shape` and `dtype` (numpy's; bf16
        data is uint16). A zero-size array allocates nothing (ptr 0)."""
        shape, dtype = _shape(shape), _dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        return DeviceArray(self, self.alloc(nbytes) if nbytes else None, shape, dtype)

    def zeros(self, shape, dtype=np.float32) -> "DeviceArray":
        """A DeviceArray of `shape` and `dtype` set to zero bytes."""
        a = self.empty(shape, dtype)
        if a.nbytes:
            self.memset(a, 0)
        return a

    def from_numpy(self, array) -> "DeviceArray":
        """A DeviceArray holding a copy of `array` (same shape and dtype)."""
        array = np.require(np.asarray(array), requirements="C")
        a = self.empty(array.shape, array.dtype)
        a.copy_from(array)
        return a

    def alloc_host(self, shape, dtype=np.uint8) -> np.ndarray:
        """A numpy array over host memory suited to asynchronous copies
        (page-locked where the backend can). The memory is freed when the
        last array viewing it is garbage collected, or when the device
        closes: do not use such an array after closing its device."""
        shape, dtype = _shape(shape), _dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        out = c_void_p()
        check(library().sparkrt_alloc_host(self._h, nbytes, byref(out)))
        owner = _HostAllocation(self, out.value)
        raw = (ctypes.c_uint8 * nbytes).from_address(out.value)
        raw._sparkrt_owner = owner  # every view keeps the allocation alive
        return np.frombuffer(raw, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def memset(self, dst, value: int, nbytes: Optional[int] = None, stream=None):
        """Sets `nbytes` (default: all of a DeviceBuffer or DeviceArray) bytes
        at `dst` to `value`; with a stream, ordered on it (and returns before
        it is done)."""
        lib = library()
        ptr = _args.device_pointer(dst, "memset dst")
        nbytes = _bytes_to_copy(nbytes, "memset", _extent(dst))
        value = _u8(value, "memset value")
        if stream is None:
            check(lib.sparkrt_memset(self._h, ptr, value, nbytes))
        else:
            check(lib.sparkrt_memset_async(self._h, ptr, value, nbytes, stream_handle(stream)))

    def copy_h2d(self, src, dst, nbytes: Optional[int] = None, stream=None):
        """Copies host `src` (a numpy array or bytes-like object) to device
        `dst`; nbytes defaults to all of src. Blocking without a stream; with
        one, ordered on it, and src must stay alive and unchanged until the
        stream reaches the copy."""
        host, host_bytes, keep = _host(src, False, "copy_h2d src", stream is None)
        ptr = _args.device_pointer(dst, "copy_h2d dst")
        nbytes = _bytes_to_copy(nbytes, "copy_h2d", host_bytes, _extent(dst))
        lib = library()
        if stream is None:
            check(lib.sparkrt_copy_h2d(self._h, host, ptr, nbytes))
        else:
            check(lib.sparkrt_copy_h2d_async(self._h, host, ptr, nbytes, stream_handle(stream)))
        del keep

    def copy_d2h(self, src, dst, nbytes: Optional[int] = None, stream=None):
        """Copies device `src` into host `dst` (a writable C-contiguous numpy
        array or bytearray); nbytes defaults to all of dst. Blocking without a
        stream; with one, the data is there once the stream reaches the
        copy."""
        host, host_bytes, keep = _host(dst, True, "copy_d2h dst", False)
        ptr = _args.device_pointer(src, "copy_d2h src")
        nbytes = _bytes_to_copy(nbytes, "copy_d2h", host_bytes, _extent(src))
        lib = library()
        if stream is None:
            check(lib.sparkrt_copy_d2h(self._h, ptr, host, nbytes))
        else:
            check(lib.sparkrt_copy_d2h_async(self._h, ptr, host, nbytes, stream_handle(stream)))
        del keep

    def copy_d2d(self, src, dst, nbytes: Optional[int] = None, stream=None):
        """Copies `nbytes` (default: all of src where known, else of dst)
        from device `src` to device `dst`; blocking, or ordered on `stream`."""
        s = _args.device_pointer(src, "copy_d2d src")
        d = _args.device_pointer(dst, "copy_d2d dst")
        nbytes = _bytes_to_copy(nbytes, "copy_d2d", _extent(src), _extent(dst))
        lib = library()
        if stream is None:
            check(lib.sparkrt_copy_d2d(self._h, s, d, nbytes))
        else:
            check(lib.sparkrt_copy_d2d_async(self._h, s, d, nbytes, stream_handle(stream)))

    # ---- streams and events ---------------------------------------------

    def stream(self) -> "Stream":
        """A new stream."""
        out = c_uint64()
        check(library().sparkrt_stream_create(self._h, byref(out)))
        return Stream(self, out.value)

    def event(self) -> "Event":
        """A new event."""
        out = c_uint64()
        check(library().sparkrt_event_create(self._h, byref(out)))
        return Event(self, out.value)

    def synchronize(self, stream=None):
        """Waits for all work queued on `stream` (None or 0: the default
        stream)."""
        check(library().sparkrt_stream_synchronize(self._h, stream_handle(stream)))

    # ---- kernels ----------------------------------------------------------

    def kernel(self, module: str, entry: str) -> "Kernel":
        """Finds `module` ($SPARKRT_KERNEL_PATH, the installed kernels, the
        ones built into the library), loads it once and resolves `entry`.
        NOT_FOUND names every place searched."""
        key = (module, entry)
        k = self._kernels.get(key)
        if k is None:
            out = c_void_p()
            check(library().sparkrt_kernel_get(self._h, module.encode(), entry.encode(),
                                               byref(out)))
            k = Kernel(self, out.value)
            self._kernels[key] = k
        return k

    # ---- graphs -----------------------------------------------------------

    def begin_capture(self, stream):
        """Starts recording the work queued on `stream` (a created stream, not
        0) instead of running it. UNIMPLEMENTED where the backend has no
        graphs."""
        check(library().sparkrt_graph_begin_capture(self._h, stream_handle(stream)))

    def end_capture(self, stream) -> "Graph":
        """Ends the recording on `stream`: the Graph of what was queued."""
        graph, nodes = c_uint64(), c_uint64()
        check(library().sparkrt_graph_end_capture(self._h, stream_handle(stream), byref(graph),
                                                  byref(nodes)))
        return Graph(self, graph.value, nodes.value)

    def capture(self, stream) -> "Capture":
        """A context manager recording `stream`'s work into a graph:

            with dev.capture(s) as cap:
                kernel.launch(grid, block, args, stream=s)
            cap.graph.launch(s)

        When the block raises, the capture is ended and its graph destroyed."""
        return Capture(self, stream)


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(_size(s, "shape") for s in shape)
    return shape


def _dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(f"dtype {dtype} holds Python objects")
    return dtype


class _Owned:
    """Something a device hands out and frees at its close."""

    def __init__(self, device):
        self._device = device

    @property
    def device(self) -> Device:
        """The device it belongs to."""
        return self._device

    def _live(self, what):
        if self._device.closed:
            raise ValueError(f"{what} belongs to a closed device")
        return self._device._handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._release()

    def _release(self):
        raise NotImplementedError


class DeviceBuffer(_Owned):
    """`nbytes` of device memory at `ptr`, freed by free(), at the end of a
    `with` block, when garbage collected, or when the device closes.
    Accepted wherever a device pointer is."""

    def __init__(self, device, ptr, nbytes):
        super().__init__(device)
        self._ptr = ptr
        self.nbytes = nbytes

    @property
    def ptr(self) -> int:
        """The device address."""
        if self._ptr is None:
            raise ValueError("the buffer was freed")
        return self._ptr

    def _sparkrt_device_ptr(self):
        return self.ptr

    @property
    def freed(self) -> bool:
        """True once free() was called (or the device closed)."""
        return self._ptr is None or self._device.closed

    def free(self):
        """Frees the memory now; a second call does nothing."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None and not self._device.closed:
            check(library().sparkrt_free(self._device._handle, ptr))

    _release = free

    def __del__(self):
        try:
            self.free()
        except Exception:  # pylint: disable=broad-except
            pass

    def __repr__(self):
        where = "freed" if self.freed else hex(self._ptr)
        return f"<sparkrt.DeviceBuffer {where}, {self.nbytes} bytes>"


class DeviceArray(_Owned):
    """A C-contiguous array in device memory: `ptr`, `shape`, `dtype`,
    `nbytes`. Owns its DeviceBuffer (`buffer`; None for a zero-size array).

    On the cuda backend it has __cuda_array_interface__ (version 3), so
    torch.as_tensor(a, device="cuda"), cupy.asarray(a) and numba see the same
    memory without a copy. Its "stream" entry is None: sparkrt work on the
    array is ordered by the caller (synchronize before handing it over).
    """

    def __init__(self, device, buffer, shape, dtype):
        super().__init__(device)
        self.buffer = buffer
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    @property
    def ptr(self) -> int:
        """The device address of element 0 (0 for a zero-size array)."""
        return self.buffer.ptr if self.buffer is not None else 0

    def _sparkrt_device_ptr(self):
        return self.ptr

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def to_numpy(self) -> np.ndarray:
        """A host copy (blocking: waits for the copy, not for other work on
        other streams)."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._device.copy_d2h(self, out)
        return out

    def copy_from(self, array):
        """Copies a host array of the same dtype and element count in
        (blocking)."""
        array = np.asarray(array)
        if array.dtype != self.dtype:
            raise TypeError(f"copy_from: dtype {array.dtype} differs from the array's "
                            f"{self.dtype}")
        if array.size != self.size:
            raise ValueError(f"copy_from: {array.size} elements given for {self.size}")
        if self.nbytes:
            self._device.copy_h2d(np.ascontiguousarray(array), self)

    def free(self):
        """Frees the memory now; a second call does nothing."""
        if self.buffer is not None:
            self.buffer.free()

    _release = free

    @property
    def __cuda_array_interface__(self):
        if self._device.closed or self._device.backend != "cuda":
            raise AttributeError("__cuda_array_interface__: only arrays of an open cuda device "
                                 "have one")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }

    def __repr__(self):
        return f"<sparkrt.DeviceArray shape={self.shape} dtype={self.dtype} ptr={self.ptr:#x}>"


class _HostAllocation:
    """The page-locked memory behind the arrays alloc_host returns."""

    def __init__(self, device, addr):
        self._device = device
        self._addr = addr

    def __del__(self):
        try:
            if not self._device.closed:
                check(library().sparkrt_free_host(self._device._handle, self._addr))
        except Exception:  # pylint: disable=broad-except
            pass


class Stream(_Owned):
    """A stream of the device. Accepted wherever a stream is, as is its int
    handle; int(stream) is the handle. Destroyed by destroy(), at the end of
    a `with` block, or when the device closes."""

    def __init__(self, device, handle):
        super().__init__(device)
        self._handle = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("the stream was destroyed")
        return self._handle

    def __int__(self):
        return self.handle

    def synchronize(self):
        """Waits for all work queued on the stream."""
        check(library().sparkrt_stream_synchronize(self._live("stream"), self.handle))

    def wait(self, event: "Event"):
        """Work queued on this stream from now on waits for `event`."""
        check(library().sparkrt_stream_wait_event(self._live("stream"), self.handle,
                                                  event.handle))

    def destroy(self):
        """Destroys the stream; a second call does nothing."""
        h, self._handle = self._handle, None
        if h is not None and not self._device.closed:
            check(library().sparkrt_stream_destroy(self._device._handle, h))

    _release = destroy

    def __repr__(self):
        return f"<sparkrt.Stream {self._handle}>"


class Event(_Owned):
    """An event of the device; destroyed by destroy(), at the end of a `with`
    block, or when the device closes."""

    def __init__(self, device, handle):
        super().__init__(device)
        self._handle = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("the event was destroyed")
        return self._handle

    def record(self, stream=None):
        """Records the event on `stream` (None: the default stream)."""
        check(library().sparkrt_event_record(self._live("event"), self.handle,
                                             stream_handle(stream)))

    def synchronize(self):
        """Waits until the recorded work is done."""
        check(library().sparkrt_event_synchronize(self._live("event"), self.handle))

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this recorded event to `end`."""
        out = c_float()
        check(library().sparkrt_event_elapsed_ms(self._live("event"), self.handle, end.handle,
                                                 byref(out)))
        return out.value

    def destroy(self):
        """Destroys the event; a second call does nothing."""
        h, self._handle = self._handle, None
        if h is not None and not self._device.closed:
            check(library().sparkrt_event_destroy(self._device._handle, h))

    _release = destroy


class Graph(_Owned):
    """Recorded work (Device.end_capture / Device.capture) replayed with one
    call, with the same pointers and values each time."""

    def __init__(self, device, handle, num_nodes):
        super().__init__(device)
        self._handle = handle
        self.num_nodes = num_nodes  # operations recorded

    def launch(self, stream=None):
        """Queues one replay on `stream` (None or 0: the default stream)."""
        if self._handle is None:
            raise ValueError("the graph was destroyed")
        check(library().sparkrt_graph_launch(self._live("graph"), self._handle,
                                             stream_handle(stream)))

    def destroy(self):
        """Destroys the graph (replays already queued still complete)."""
        h, self._handle = self._handle, None
        if h is not None and not self._device.closed:
            check(library().sparkrt_graph_destroy(self._device._handle, h))

    _release = destroy


class Capture:
    """Device.capture's context manager; `graph` is set when the block ends."""

    def __init__(self, device, stream):
        self._device = device
        self._stream = stream
        self.graph: Optional[Graph] = None

    def __enter__(self):
        self._device.begin_capture(self._stream)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.graph = self._device.end_capture(self._stream)
            return
        try:  # the block's exception is what the caller needs to see
            self._device.end_capture(self._stream).destroy()
        except Error:
            pass


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """One declared kernel parameter."""
    index: int
    name: str
    type_name: str  # as PTX spells it: ".u64", ".b8[16]"
    type: _args.ParamType
    size: int
    align: int
    offset: int  # in the packed parameter buffer


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """A kernel's signature and launch directives."""
    module: str
    entry: str
    declaration: str  # the PTX .entry declaration
    params: Tuple[ParamInfo, ...]
    params_size: int
    reqntid: Tuple[int, int, int]  # (0, 0, 0): no .reqntid
    maxntid: Tuple[int, int, int]
    unsupported: str  # why it cannot be launched through sparkrt; "" when it can

    def __str__(self):
        return f"{self.entry}({', '.join(p.type_name for p in self.params)})"


class Kernel:
    """A resolved kernel (Device.kernel), owned by its device."""

    def __init__(self, device, handle):
        self._device = device
        self._handle = handle
        lib = library()
        raw = _structs.KernelInfo.new()
        check(lib.sparkrt_kernel_info_get(handle, byref(raw)))
        params = []
        for i in range(raw.num_params):
            p = _structs.ParamInfo.new()
            check(lib.sparkrt_kernel_param(handle, i, byref(p)))
            f = _from_struct(p)
            try:
                f["type"] = _args.ParamType(f["type"])
            except ValueError:
                pass
            params.append(ParamInfo(index=i, **f))
        f = _from_struct(raw)
        del f["num_params"]
        self.info = KernelInfo(params=tuple(params), **f)

    @property
    def device(self) -> Device:
        return self._device

    def launch(self, grid, block, args=(), shared_mem: int = 0, stream=None, *,
               dependent: bool = False, cluster=None):
        """Queues the kernel on `stream` (None or 0: the default stream) and
        returns without waiting for it.

        grid, block: an int or a tuple of up to 3 ints.
        dependent: a programmatic dependent launch, which may start before
            the previous kernel on the stream ends (the kernel waits where it
            reads that kernel's output); elsewhere a plain launch.
        cluster: None (no cluster), or a thread-block cluster in blocks as an
            int or up to 3 ints, each at least 1 and dividing the grid's, at
            most DeviceProperties.max_cluster_size blocks in all, on a device
            with supports_clusters. The runtime checks both (KernelLaunch's
            rules and messages).
        args: one item per parameter. Plain ints and floats (numpy scalars
            too) are converted by the declared type: .u32/.b32 -> U32 (I32 if
            negative), .s32 -> I32, .u64/.b64 -> U64 (I64 if negative), .s64 ->
            I64, .f32 -> F32, .f64 -> F64, 1- and 2-byte types and .f16 ->
            their bytes; a float for an integer parameter goes as F32 or F64 of
            its size. DeviceBuffer, DeviceArray, None (null), torch tensors and
            __cuda_array_interface__ objects -> PTR; bytes and numpy structured
            scalars or arrays -> BYTES aligned as the parameter. sparkrt.u32,
            i32, u64, i64, f32, f64, ptr and struct give the kind explicitly.
            The runtime checks the arguments against the signature (count,
            sizes, offsets, kinds) and the geometry against the device and the
            kernel's directives; a mismatch raises sparkrt.Error with its
            message.
        """
        lib = library()
        if self._device.closed:
            raise ValueError(f"{self.info.entry}: the device is closed")
        cfg = _structs.LaunchConfig.new()
        cfg.grid[:] = _dim3(grid, "grid")
        cfg.block[:] = _dim3(block, "block")
        shared_mem = _args._integer(shared_mem, "shared_mem")
        if not 0 <= shared_mem < 2**32:
            raise OverflowError(f"shared_mem {shared_mem} is out of range")
        cfg.shared_mem_bytes = shared_mem
        cfg.stream = stream_handle(stream)
        if not isinstance(dependent, (bool, np.bool_)):
            raise TypeError(f"dependent: expected a bool, got {type(dependent).__name__}")
        cfg.flags = _structs.LAUNCH_DEPENDENT if dependent else 0
        if cluster is not None:
            cfg.cluster[:] = _dim3(cluster, "cluster")
        if (cfg.flags or any(cfg.cluster)) and _c_api_minor() < 1:
            # A 1.0 library would take the config and ignore the attributes.
            raise Error(StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION",
                        f"{self.info.entry}: launch attributes need sparkrt C API 1.1, the "
                        f"loaded library has 1.{_c_api_minor()}")
        array, keep = _args.build_args(args, self.info.params)
        check(lib.sparkrt_launch(self._handle, byref(cfg), array,
                                 len(array) if array is not None else 0))
        del keep

    def __repr__(self):
        return f"<sparkrt.Kernel {self.info.module}.{self.info}>"
