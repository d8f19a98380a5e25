"""Devices, memory, streams and events on every backend the run selects."""
import gc

import numpy as np
import pytest

import sparkrt


@pytest.mark.backends("mock", "cpu")
def test_open_properties_close(backend):
    dev = sparkrt.Device.open(backend)
    p = dev.properties
    assert isinstance(p, sparkrt.DeviceProperties)
    assert p.backend == backend == dev.backend
    assert p.index == 0
    assert p.plugin_path.endswith(f"libsparkrt_backend_{backend}.so")
    assert p.name and p.plugin_version
    assert p.max_threads_per_block >= 256 and len(p.max_block_dim) == 3
    assert p.accepts_signatures and p.has_graphs and p.has_collectives
    assert p.total_memory > 0 and not p.emulated
    # The mock takes launch attributes as a Hopper GPU does; the cpu backend
    # overlaps no launches and has no clusters.
    mock = backend == "mock"
    assert (p.supports_dependent_launch, p.supports_clusters, p.max_cluster_size) == \
        ((True, True, 8) if mock else (False, False, 0))
    assert dev.native_handle != 0
    assert repr(dev).startswith(f"<sparkrt.Device {backend}:0")
    assert not dev.closed
    dev.close()
    assert dev.closed
    dev.close()  # a second close does nothing
    with pytest.raises(ValueError, match="closed"):
        dev.alloc(16)


@pytest.mark.backends("mock", "cpu")
def test_open_by_index(backend):
    with sparkrt.Device.open(backend, 1) as d1:
        assert d1.properties.index == 1


def test_alloc_zero_is_the_runtimes_error(dev):
    with pytest.raises(sparkrt.Error) as info:
        dev.alloc(0)
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert str(info.value) == "alloc(0 bytes): allocations must be at least one byte"


def test_no_mock_extension_except_on_the_mock(dev, backend):
    assert (dev.extension("sparkrt.mock.v1") is not None) == (backend == "mock")
    assert dev.extension("sparkrt.no.such.extension") is None


DTYPES = [np.float32, np.uint16, np.int8, np.float64, np.int32]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_memory_round_trip(dev, seeded, dtype):
    rng = seeded.rng
    n = int(rng.integers(1, 5000))
    host = rng.integers(0, 256, size=n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    a = dev.from_numpy(host)
    assert (a.shape, a.dtype, a.nbytes) == ((n,), np.dtype(dtype), host.nbytes)
    assert a.ptr % 256 == 0
    assert np.array_equal(a.to_numpy().view(np.uint8), host.view(np.uint8)), seeded.where

    # d2d into the middle of a poisoned buffer: the bytes around stay.
    pad = 64
    b = dev.alloc(host.nbytes + 2 * pad)
    dev.memset(b, 0xA5)
    dev.copy_d2d(a, b.ptr + pad, host.nbytes)
    out = np.empty(host.nbytes + 2 * pad, np.uint8)
    dev.copy_d2h(b, out)
    assert np.all(out[:pad] == 0xA5) and np.all(out[-pad:] == 0xA5), seeded.where
    assert np.array_equal(out[pad:-pad], host.view(np.uint8)), seeded.where

    # h2d of part of a host array, and copy_from / to_numpy with shapes.
    c = dev.empty((2, n), dtype)
    c.copy_from(np.stack([host, host[::-1]]))
    got = c.to_numpy()
    assert got.shape == (2, n)
    assert np.array_equal(got[1].view(np.uint8), host[::-1].copy().view(np.uint8)), seeded.where
    b.free()
    b.free()
    assert b.freed


def test_copy_sizes_are_checked_before_the_call(dev):
    a = dev.empty(16, np.float32)
    with pytest.raises(ValueError, match="128 bytes do not fit in 64"):
        dev.copy_h2d(np.zeros(32, np.float32), a)
    with pytest.raises(ValueError, match="C-contiguous"):
        dev.copy_d2h(a, np.zeros(32, np.float32)[::2])
    with pytest.raises(TypeError):
        a.copy_from(np.zeros(16, np.float64))
    with pytest.raises(ValueError):
        a.copy_from(np.zeros(15, np.float32))
    with pytest.raises(TypeError, match="nbytes is required"):
        dev.copy_d2d(a.ptr, a.ptr + 32)


def test_runtime_checks_raw_pointers(dev, backend):
    # A raw pointer past an allocation reaches the backend, which refuses it.
    a = dev.alloc(256)
    with pytest.raises(sparkrt.Error) as info:
        dev.copy_h2d(np.zeros(1024, np.uint8), a.ptr)
    assert info.value.message


def test_zero_size_arrays(dev):
    a = dev.empty((0, 3), np.float32)
    assert a.ptr == 0 and a.nbytes == 0 and a.buffer is None
    assert a.to_numpy().shape == (0, 3)
    b = dev.from_numpy(np.zeros((4, 0), np.int32))
    assert b.shape == (4, 0)


@pytest.mark.backends("mock", "cpu")
def test_memory_is_freed_when_collected(dev):
    a = dev.alloc(1024)
    ptr = a.ptr
    dev.copy_h2d(np.zeros(16, np.uint8), ptr)
    del a
    gc.collect()
    # Both host backends refuse a copy into memory that was freed.
    with pytest.raises(sparkrt.Error):
        dev.copy_h2d(np.zeros(16, np.uint8), ptr)


def test_async_copies_on_a_stream_with_events(dev, seeded):
    rng = seeded.rng
    n = int(rng.integers(100, 3000))
    src = dev.alloc_host((n,), np.float32)
    src[:] = rng.standard_normal(n, dtype=np.float32)
    dst = dev.alloc_host(n, np.float32)
    dst[:] = np.nan

    s = dev.stream()
    other = dev.stream()
    start, middle, end = dev.event(), dev.event(), dev.event()
    a = dev.empty(n, np.float32)
    b = dev.empty(n, np.float32)
    start.record(s)
    dev.memset(b, 0xFF, stream=s)
    dev.copy_h2d(src, a, stream=s)
    middle.record(s)
    other.wait(middle)
    dev.copy_d2d(a, b, stream=other)
    dev.copy_d2h(b, dst, stream=other)
    end.record(other)
    end.synchronize()
    assert np.array_equal(dst, src), seeded.where
    assert start.elapsed_ms(end) >= 0.0
    s.synchronize()
    dev.synchronize(other)
    dev.synchronize()
    for obj in (start, middle, end, s, other):
        obj.destroy()
        obj.destroy()
    with pytest.raises(ValueError, match="destroyed"):
        s.synchronize()


def test_streams_and_events_as_context_managers(dev):
    with dev.stream() as s, dev.event() as e:
        e.record(s)
        e.synchronize()
        assert int(s) == s.handle != 0
    with pytest.raises(TypeError):
        dev.synchronize("default")


def test_host_memory_lives_as_long_as_its_arrays(dev):
    h = dev.alloc_host((4, 8), np.int32)
    assert h.shape == (4, 8) and h.dtype == np.int32
    view = h[1:3]
    del h
    gc.collect()
    view[:] = 7  # still mapped: the view keeps the allocation alive
    assert np.all(view == 7)


def test_objects_of_a_closed_device(backend):
    dev = sparkrt.Device.open(backend)
    a = dev.from_numpy(np.arange(10, dtype=np.int32))
    s = dev.stream()
    dev.close()
    assert a.buffer.freed
    with pytest.raises(ValueError, match="closed"):
        a.to_numpy()
    a.free()  # the close freed it already: nothing to do
    s.destroy()
    with pytest.raises(ValueError, match="freed"):
        a.to_numpy()
    with pytest.raises(ValueError, match="closed"):
        dev.kernel("vector_ops", "fill_u32")


@pytest.mark.backends("mock", "cpu", "vulkan")
def test_no_cuda_array_interface_off_cuda(dev):
    # (on cuda, test_triton_gpu.py hands one to torch)
    a = dev.empty(4)
    assert not hasattr(a, "__cuda_array_interface__")
