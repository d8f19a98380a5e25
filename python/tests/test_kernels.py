"""Kernel lookup, signatures and launches of the vector_ops module
(kernels/signatures/vector_ops.sig): computed on cpu, recorded on the mock,
and refused by the runtime's signature check with its own messages."""
import numpy as np
import pytest

import sparkrt
from sparkrt import ParamType
from sparkrt.testing import MockLaunch, mock_launches


def test_lookup_and_info(dev):
    k = dev.kernel("vector_ops", "vector_add_f32")
    assert dev.kernel("vector_ops", "vector_add_f32") is k
    info = k.info
    assert (info.module, info.entry) == ("vector_ops", "vector_add_f32")
    assert str(info) == "vector_add_f32(.u64, .u64, .u64, .u32)"
    assert [p.name for p in info.params] == [f"vector_add_f32_param_{i}" for i in range(4)]
    assert [p.type for p in info.params] == [ParamType.U64] * 3 + [ParamType.U32]
    assert [(p.size, p.align, p.offset) for p in info.params] == [(8, 8, 0), (8, 8, 8),
                                                                   (8, 8, 16), (4, 4, 24)]
    assert info.params_size == 28
    assert info.declaration.startswith(".visible .entry vector_add_f32(\n\t.param .u64 ")
    assert "\t.param .u32 vector_add_f32_param_3\n)" in info.declaration
    assert info.reqntid == (0, 0, 0) and info.maxntid == (0, 0, 0)
    assert info.unsupported == ""

    fill = dev.kernel("vector_ops", "fill_u32").info
    assert str(fill) == "fill_u32(.u64, .u32, .u32)"
    axpy = dev.kernel("vector_ops", "axpy_f32").info
    assert str(axpy) == "axpy_f32(.b8[16], .u64, .u64)"
    p0 = axpy.params[0]
    assert (p0.type, p0.size, p0.align, p0.offset) == (ParamType.BYTES, 16, 8, 0)


def test_lookup_failures_name_what_was_searched(dev):
    with pytest.raises(sparkrt.Error) as info:
        dev.kernel("no_such_module", "x")
    assert info.value.code == sparkrt.StatusCode.NOT_FOUND
    assert info.value.message.startswith("kernel module 'no_such_module' not found: searched ")
    with pytest.raises(sparkrt.Error) as info:
        dev.kernel("vector_ops", "no_such_entry")
    assert info.value.code == sparkrt.StatusCode.NOT_FOUND
    assert "has no entry 'no_such_entry'; its entries: [vector_add_f32, fill_u32" in \
        info.value.message


def _poisoned(dev, n, pad):
    return dev.from_numpy(np.full(n + pad, np.nan, np.float32))


@pytest.mark.backends("mock", "cpu")
def test_vector_add(dev, backend, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 5000))
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    pad = 64
    da, db, out = dev.from_numpy(a), dev.from_numpy(b), _poisoned(dev, n, pad)
    grid = (n + 255) // 256
    dev.kernel("vector_ops", "vector_add_f32").launch(grid, 256, [da, db, out, n])
    dev.synchronize()
    got = out.to_numpy()
    assert np.all(np.isnan(got[n:])), f"written past n; {seeded.where}"
    if backend == "cpu":
        assert np.array_equal(got[:n], a + b), seeded.where
    else:
        assert np.all(np.isnan(got[:n])), "the mock computes nothing"
        assert mock_launches(dev) == [
            MockLaunch("vector_ops", "vector_add_f32", (grid, 1, 1), (256, 1, 1))]


@pytest.mark.backends("mock")
def test_launch_attributes_are_recorded(dev, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 5000))
    da, db, out = (dev.from_numpy(rng.standard_normal(n, dtype=np.float32)) for _ in range(3))
    add = dev.kernel("vector_ops", "vector_add_f32")  # scalars: packed once, then cached
    axpy = dev.kernel("vector_ops", "axpy_f32")  # a struct: packed every time
    params = np.zeros((), dtype=[("alpha", "<f4"), ("pad", "<u4"), ("n", "<u8")])
    params["alpha"], params["n"] = 1.0, n
    # Cluster dimensions that divide the grid, at most 8 blocks (the mock's limit).
    grid = tuple(int(rng.choice([2, 4, 8])) for _ in range(3))
    cluster = tuple(int(rng.choice([d for d in (1, 2) if g % d == 0])) for g in grid)
    want = []
    for dependent, clus in [(False, None), (True, None), (False, cluster), (True, 2),
                            (True, (1, 1)), (False, None)]:
        add.launch(grid, 256, [da, db, out, n], dependent=dependent, cluster=clus)
        axpy.launch(grid, 256, [params[()], da, db], dependent=dependent, cluster=clus)
        c = (0, 0, 0) if clus is None else \
            ((clus, 1, 1) if isinstance(clus, int) else tuple(clus) + (1,) * (3 - len(clus)))
        want += [MockLaunch("vector_ops", "vector_add_f32", grid, (256, 1, 1), dependent, c),
                 MockLaunch("vector_ops", "axpy_f32", grid, (256, 1, 1), dependent, c)]
    assert mock_launches(dev) == want, seeded.where


@pytest.mark.backends("mock", "cpu")
def test_launch_attribute_refusals(dev, backend):
    out = dev.zeros(64, np.float32)
    add = dev.kernel("vector_ops", "vector_add_f32")
    with pytest.raises(sparkrt.Error) as info:
        add.launch(4, 64, [out, out, out, 0], cluster=(2, 0, 1))
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert info.value.message == ("vector_add_f32: cluster (2, 0, 1) has a zero dimension; give "
                                  "at least 1 block in each, or (0, 0, 0) for no cluster")
    with pytest.raises(sparkrt.Error) as info:
        add.launch(3, 64, [out, out, out, 0], cluster=2)
    if backend == "mock":
        assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
        assert info.value.message == ("vector_add_f32: grid (3, 1, 1) is not a multiple of "
                                      "cluster (2, 1, 1) in every dimension")
        with pytest.raises(sparkrt.Error, match="has 16 blocks, the device allows 8 per cluster"):
            add.launch(16, 64, [out, out, out, 0], cluster=16)
    else:
        assert info.value.code == sparkrt.StatusCode.UNIMPLEMENTED
        assert info.value.message == (
            f"vector_add_f32: cluster (2, 1, 1) requested, but device '{dev.properties.name}' "
            "(cpu backend) does not support thread-block clusters")
    with pytest.raises(TypeError, match="dependent"):
        add.launch(4, 64, [out, out, out, 0], dependent=1)
    # A dependent launch without a cluster runs everywhere (as a plain one on cpu).
    add.launch(1, 64, [out, out, out, 0], dependent=True)
    dev.synchronize()


@pytest.mark.backends("mock", "cpu")
def test_scalars_follow_the_declared_types(dev, backend, seeded):
    n = int(seeded.rng.integers(300, 2000))
    out = dev.from_numpy(np.zeros(n, np.uint32))
    fill = dev.kernel("vector_ops", "fill_u32")
    fill.launch(((n + 255) // 256, 1, 1), (256,), [out, 0xDEADBEEF, n])  # above 2^31: U32
    if backend == "cpu":
        assert np.all(out.to_numpy() == 0xDEADBEEF), seeded.where
    fill.launch((n + 255) // 256, 256, [out, -2, np.int64(n)])  # negative: I32, same bits
    if backend == "cpu":
        assert np.all(out.to_numpy() == 0xFFFFFFFE), seeded.where
    else:
        assert [r.entry for r in mock_launches(dev)] == ["fill_u32", "fill_u32"]


@pytest.mark.backends("mock", "cpu")
def test_struct_arguments(dev, backend, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 3000))
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    alpha = np.float32(rng.uniform(0.5, 2.0))
    params = np.zeros((), dtype=[("alpha", "<f4"), ("pad", "<u4"), ("n", "<u8")])
    params["alpha"], params["n"] = alpha, n
    dx, dy = dev.from_numpy(x), dev.from_numpy(y)
    axpy = dev.kernel("vector_ops", "axpy_f32")
    axpy.launch((n + 255) // 256, 256, [params[()], dx, dy])  # the structured scalar
    if backend == "cpu":
        got = dy.to_numpy()
        want = alpha.astype(np.float64) * x + y
        # one rounding of the product and one of the sum
        tol = 2.0**-23 * (np.abs(alpha * x) + np.abs(want))
        assert np.all(np.abs(got - want) <= tol), seeded.where

    # A 136-byte array parameter (.align 4 .b8[136]) from a numpy array.
    values = rng.integers(0, 2**32, size=34, dtype=np.uint64).astype(np.uint32)
    out = dev.from_numpy(np.zeros(34, np.uint32))
    dev.kernel("vector_ops", "copy_args_u32").launch(1, 34, [out, values])
    if backend == "cpu":
        assert np.array_equal(out.to_numpy(), values), seeded.where
    else:
        assert [(r.entry, r.block) for r in mock_launches(dev)] == [
            ("axpy_f32", (256, 1, 1)), ("copy_args_u32", (34, 1, 1))]


# The runtime's messages, as KernelLaunch (runtime/src/kernel_launch.cc)
# words them: "<entry>: <n> parameters declared, <m> given (missing #<i>
# <type>)", "(extra #<i> <C++ kind>)", "<entry>: parameter #<i> is <type>,
# given <ptx kind> (<C++ kind>, for '<name>'); <advice>", sizes as "<entry>:
# parameter #<i> (<name>) is <type> (<n> bytes), given <C++ kind> (<m>
# bytes)", and offsets as "... is declared at offset <o> (.align <a>), given
# at <o'> (alignment <a'>); give the struct the kernel's alignment with
# alignas(<a>)".
P3 = "vector_add_f32_param_3"
WRONG_ARGUMENTS = [
    ("missing", lambda a: [a, a, a],
     "vector_add_f32: 4 parameters declared, 3 given (missing #3 .u32)"),
    ("extra", lambda a: [a, a, a, 1, sparkrt.u32(1)],
     "vector_add_f32: 4 parameters declared, 5 given (extra #4 uint32_t)"),
    ("f32_for_u32", lambda a: [a, a, a, sparkrt.f32(1.0)],
     f"vector_add_f32: parameter #3 is .u32, given f32 (float, for '{P3}'); "
     "pass a uint32_t or int32_t"),
    ("float_for_u32", lambda a: [a, a, a, 1.5],
     f"vector_add_f32: parameter #3 is .u32, given f32 (float, for '{P3}'); "
     "pass a uint32_t or int32_t"),
    ("f64_for_u32", lambda a: [a, a, a, sparkrt.f64(1.0)],
     f"vector_add_f32: parameter #3 ({P3}) is .u32 (4 bytes), given double (8 bytes)"),
    ("ptr_for_u32", lambda a: [a, a, a, a],
     f"vector_add_f32: parameter #3 ({P3}) is .u32 (4 bytes), given DevicePtr (8 bytes)"),
    ("too_many", lambda a: [0] * 65,
     "vector_add_f32: more than 64 arguments or 4096 bytes of parameters given"),
]


@pytest.mark.parametrize("case,make,message", WRONG_ARGUMENTS, ids=[w[0] for w in WRONG_ARGUMENTS])
def test_wrong_arguments_get_the_runtimes_message(dev, backend, case, make, message):
    a = dev.alloc(1024)
    k = dev.kernel("vector_ops", "vector_add_f32")
    with pytest.raises(sparkrt.Error) as info:
        k.launch(1, 256, make(a))
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT, case
    assert info.value.message == message
    if backend == "mock":
        assert mock_launches(dev) == []


def test_wrong_structs_get_the_runtimes_message(dev):
    axpy = dev.kernel("vector_ops", "axpy_f32")
    with pytest.raises(sparkrt.Error) as info:
        axpy.launch(1, 32, [sparkrt.struct(bytes(12), 8), 0, 0])
    assert info.value.message == ("axpy_f32: parameter #0 (axpy_f32_param_0) is .b8[16] "
                                  "(16 bytes), given struct (12 bytes)")
    copy = dev.kernel("vector_ops", "copy_args_u32")
    with pytest.raises(sparkrt.Error) as info:
        copy.launch(1, 34, [0, sparkrt.struct(bytes(136), 16)])
    assert info.value.message == (
        "copy_args_u32: parameter #1 (copy_args_u32_param_1) is declared at offset 8 (.align "
        "4), given at 16 (alignment 16); give the struct the kernel's alignment with alignas(4)")


def test_geometry_is_checked(dev):
    k = dev.kernel("vector_ops", "vector_add_f32")
    limit = dev.properties.max_block_dim
    with pytest.raises(sparkrt.Error) as info:
        k.launch(0, 256, [0, 0, 0, 0])
    assert info.value.message == "vector_add_f32: grid (0, 1, 1) has a zero dimension"
    with pytest.raises(sparkrt.Error) as info:
        k.launch(1, limit[0] * 2, [0, 0, 0, 0])
    assert info.value.message == (f"vector_add_f32: block ({limit[0] * 2}, 1, 1) exceeds the "
                                  f"device limit ({limit[0]}, {limit[1]}, {limit[2]})")
    with pytest.raises(ValueError):
        k.launch((1, 1, 1, 1), 256, [0, 0, 0, 0])
    with pytest.raises(OverflowError):
        k.launch(-1, 256, [0, 0, 0, 0])


def test_launch_on_a_stream(dev, backend, seeded):
    n = 1000
    a = seeded.rng.standard_normal(n, dtype=np.float32)
    da = dev.from_numpy(a)
    out = _poisoned(dev, n, 0)
    with dev.stream() as s:
        dev.kernel("vector_ops", "vector_add_f32").launch(4, 256, [da, da, out, n], stream=s)
        s.synchronize()
    if backend == "cpu":
        assert np.array_equal(out.to_numpy(), a + a), seeded.where


def test_launch_after_close(backend):
    dev = sparkrt.Device.open(backend)
    k = dev.kernel("vector_ops", "fill_u32")
    dev.close()
    with pytest.raises(ValueError, match="closed"):
        k.launch(1, 1, [0, 0, 0])
