"""Communicators: NCCL-style collectives between devices of one backend
(sparkrt_c.h, "communicators"; docs/collectives.md).

    comms = sparkrt.comm.create_all([dev0, dev1])   # rank i on devices[i]
    sparkrt.comm.group(dev0, lambda: [c.all_reduce(s, r, n, "f32", "sum")
                                      for c, s, r in zip(comms, sends, recvs)])
    for c in comms:
        c.destroy()

A collective returns once its peers joined (host backends) or once it is
queued (NCCL), so one thread driving several ranks issues their calls inside
group(), or gives each rank its own thread. Counts are in elements. A
communicator is used by one thread at a time; a device's close() destroys the
communicators still made on it.
"""
import enum
from ctypes import byref, c_char_p, c_void_p

import numpy as np

from . import _args, _structs
from ._lib import GROUP_FN, StatusCode, check, error_from_status, library
from .device import Device, stream_handle


class DataType(enum.IntEnum):
    """SparkrtDataType."""
    U8 = 1
    I32 = 2
    F16 = 3
    BF16 = 4
    F32 = 5


class ReduceOp(enum.IntEnum):
    """SparkrtReduceOp."""
    SUM = 1
    MAX = 2
    MIN = 3


_DTYPE_NAMES = {"u8": DataType.U8, "i32": DataType.I32, "f16": DataType.F16,
                "bf16": DataType.BF16, "f32": DataType.F32}
# numpy has no bf16: bf16 data travels as uint16, named "bf16" explicitly.
_NUMPY_DTYPES = {np.dtype(np.uint8): DataType.U8, np.dtype(np.int32): DataType.I32,
                 np.dtype(np.float16): DataType.F16, np.dtype(np.float32): DataType.F32}
_OP_NAMES = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN}


def data_type(dtype):
    """A DataType from a name ("u8", "i32", "f16", "bf16", "f32"), a DataType
    or int, or a numpy dtype (uint8, int32, float16, float32)."""
    if isinstance(dtype, str):
        try:
            return _DTYPE_NAMES[dtype]
        except KeyError:
            raise ValueError(f"unknown data type {dtype!r}; one of "
                             f"{', '.join(_DTYPE_NAMES)}") from None
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        return int(dtype)  # out-of-range values are the runtime's to refuse
    try:
        return _NUMPY_DTYPES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"no collective data type for {dtype!r} (bf16 data is uint16: name "
                         "it \"bf16\")") from None


def reduce_op(op):
    """A ReduceOp from "sum", "max", "min", a ReduceOp or an int."""
    if isinstance(op, str):
        try:
            return _OP_NAMES[op]
        except KeyError:
            raise ValueError(f"unknown reduce op {op!r}; one of {', '.join(_OP_NAMES)}") \
                from None
    return int(op)


def data_type_size(dtype):
    """Bytes of one element of `dtype`; 0 outside SparkrtDataType."""
    return library().sparkrt_data_type_size(data_type(dtype))


def library_name(device: Device) -> str:
    """The collectives library of the device's backend ("NCCL 2.21.5",
    "sparkrt host collectives 1"). UNIMPLEMENTED where there is none."""
    out = c_char_p()
    check(library().sparkrt_comm_library(device._h, byref(out)))
    return (out.value or b"").decode("utf-8", "replace")


def _count(count, what):
    count = _args._integer(count, what)
    if not 0 <= count < 2**64:
        raise OverflowError(f"{what}: {count} is out of range")
    return count


class Communicator:
    """One rank of a communicator. Destroy it (destroy(), a `with` block, or
    the device's close) before its device closes."""

    def __init__(self, device, handle):
        self._device = device
        self._handle = handle
        device._comms.add(self)

    @property
    def _h(self):
        if self._handle is None:
            raise ValueError("the communicator was destroyed")
        return self._handle

    @property
    def device(self) -> Device:
        return self._device

    @property
    def rank(self) -> int:
        return library().sparkrt_comm_rank(self._h)

    @property
    def size(self) -> int:
        return library().sparkrt_comm_size(self._h)

    def destroy(self):
        """Frees the communicator; a second call does nothing."""
        h, self._handle = self._handle, None
        if h is not None:
            self._device._comms.discard(self)
            check(library().sparkrt_comm_destroy(h))

    def abort(self):
        """Ends the clique at once: pending and later collectives fail."""
        check(library().sparkrt_comm_abort(self._h))

    def status(self):
        """The communicator's asynchronous error as a sparkrt.Error, or None
        while it is healthy."""
        st = library().sparkrt_comm_status(self._h)
        return error_from_status(st) if st else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def all_reduce(self, send, recv, count, dtype, op="sum", stream=None):
        """recv = op over the ranks of send, `count` elements of `dtype`."""
        check(library().sparkrt_all_reduce(
            self._h, _args.device_pointer(send, "all_reduce send"),
            _args.device_pointer(recv, "all_reduce recv"), _count(count, "all_reduce count"),
            data_type(dtype), reduce_op(op), stream_handle(stream)))

    def all_gather(self, send, recv, count, dtype, stream=None):
        """recv holds size * count elements, rank r's at r * count."""
        check(library().sparkrt_all_gather(
            self._h, _args.device_pointer(send, "all_gather send"),
            _args.device_pointer(recv, "all_gather recv"), _count(count, "all_gather count"),
            data_type(dtype), stream_handle(stream)))

    def reduce_scatter(self, send, recv, count, dtype, op="sum", stream=None):
        """send holds size * count elements; recv gets block `rank` of the
        reduction."""
        check(library().sparkrt_reduce_scatter(
            self._h, _args.device_pointer(send, "reduce_scatter send"),
            _args.device_pointer(recv, "reduce_scatter recv"),
            _count(count, "reduce_scatter count"), data_type(dtype), reduce_op(op),
            stream_handle(stream)))

    def broadcast(self, send, recv, count, dtype, root=0, stream=None):
        """Every rank's recv gets `root`'s send (read on the root only)."""
        check(library().sparkrt_broadcast(
            self._h, _args.device_pointer(send, "broadcast send"),
            _args.device_pointer(recv, "broadcast recv"), _count(count, "broadcast count"),
            data_type(dtype), int(root), stream_handle(stream)))

    def send(self, buf, count, dtype, peer, stream=None):
        """Sends `count` elements to rank `peer`."""
        check(library().sparkrt_send(self._h, _args.device_pointer(buf, "send buf"),
                                     _count(count, "send count"), data_type(dtype), int(peer),
                                     stream_handle(stream)))

    def recv(self, buf, count, dtype, peer, stream=None):
        """Receives `count` elements from rank `peer`."""
        check(library().sparkrt_recv(self._h, _args.device_pointer(buf, "recv buf"),
                                     _count(count, "recv count"), data_type(dtype), int(peer),
                                     stream_handle(stream)))

    def __repr__(self):
        if self._handle is None:
            return "<sparkrt.comm.Communicator destroyed>"
        return f"<sparkrt.comm.Communicator rank {self.rank} of {self.size}>"


def create_all(devices):
    """One communicator per device, rank i on devices[i] (open devices of
    one backend, each at most once)."""
    devices = list(devices)
    n = len(devices)
    handles = (c_void_p * n)(*[d._h for d in devices])
    out = (c_void_p * n)()
    check(library().sparkrt_comm_create_all(handles, n, out))
    return [Communicator(d, out[i]) for i, d in enumerate(devices)]


def unique_id(device: Device) -> bytes:
    """The id (128 bytes) of a new clique made on `device`: hand it to every
    rank's create_rank (across processes too)."""
    out = _structs.UniqueId()
    check(library().sparkrt_comm_unique_id(device._h, byref(out)))
    return bytes(out.bytes)


def create_rank(device: Device, num_ranks: int, rank: int, uid: bytes) -> Communicator:
    """Joins the clique of `uid` as `rank` of `num_ranks`; returns once every
    rank has joined."""
    uid = bytes(uid)
    if len(uid) != 128:
        raise ValueError(f"create_rank: a unique id has 128 bytes, got {len(uid)}")
    raw = _structs.UniqueId()
    raw.bytes[:] = list(uid)
    out = c_void_p()
    check(library().sparkrt_comm_create_rank(device._h, int(num_ranks), int(rank), byref(raw),
                                             byref(out)))
    return Communicator(device, out.value)


def group(device: Device, fn, *args, **kwargs):
    """Calls fn(*args, **kwargs) with the collectives it issues on
    communicators of `device`'s backend grouped (NCCL's group start/end), and
    returns its result. An exception from fn is re-raised once the group has
    ended; otherwise a failure of the group raises sparkrt.Error."""
    lib = library()
    result, raised = [], []

    def body(_user_data):
        try:
            result.append(fn(*args, **kwargs))
            return None
        except BaseException as e:  # pylint: disable=broad-except
            raised.append(e)
            return lib.sparkrt_status_new(StatusCode.UNKNOWN,
                                          f"{type(e).__name__}: {e}".encode("utf-8", "replace"))

    callback = GROUP_FN(body)  # referenced until the call returns
    st = lib.sparkrt_comm_group(device._h, callback, None)
    if raised:
        if st:
            lib.sparkrt_status_free(st)
        raise raised[0]
    check(st)
    return result[0] if result else None

