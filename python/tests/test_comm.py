"""Communicators between two devices of one host backend in one process (the
host collectives move real bytes on the mock too)."""
import threading

import numpy as np
import pytest

import sparkrt
from sparkrt import comm


@pytest.fixture
def pair(backend):
    devs = [sparkrt.Device.open(backend, i) for i in range(2)]
    try:
        yield devs
    finally:
        for d in devs:
            d.close()


@pytest.mark.backends("mock", "cpu")
def test_all_reduce_in_a_group(pair, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 5000))
    comms = comm.create_all(pair)
    assert [c.rank for c in comms] == [0, 1] and [c.size for c in comms] == [2, 2]
    assert comm.library_name(pair[0]) == "sparkrt host collectives 1"
    host = [rng.standard_normal(n, dtype=np.float32) for _ in pair]
    sends = [d.from_numpy(h) for d, h in zip(pair, host)]
    recvs = [d.from_numpy(np.full(n, np.nan, np.float32)) for d in pair]

    def issue():
        for c, s, r in zip(comms, sends, recvs):
            c.all_reduce(s, r, n, "f32", "sum")
    comm.group(pair[0], issue)
    for d in pair:
        d.synchronize()
    want = host[0] + host[1]  # two terms: the order cannot change a float32 sum
    for rank, r in enumerate(recvs):
        assert np.array_equal(r.to_numpy(), want), f"rank {rank}; {seeded.where}"

    # max over i32, named by numpy dtype and enum
    ints = [rng.integers(-1000, 1000, size=n, dtype=np.int32) for _ in pair]
    for d, s, h in zip(pair, sends, ints):
        d.copy_h2d(h, s)
    comm.group(pair[0], lambda: [c.all_reduce(s, r, n, np.int32, comm.ReduceOp.MAX)
                                 for c, s, r in zip(comms, sends, recvs)])
    for r in recvs:
        assert np.array_equal(r.to_numpy().view(np.int32), np.maximum(*ints)), seeded.where
    for c in comms:
        c.destroy()
        c.destroy()


@pytest.mark.backends("mock", "cpu")
def test_all_gather_and_broadcast_from_threads(pair, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 3000))
    comms = comm.create_all(pair)
    host = [sparkrt.bf16_from_f32(rng.standard_normal(n)) for _ in pair]
    sends = [d.from_numpy(h) for d, h in zip(pair, host)]
    gathered = [d.from_numpy(np.full(2 * n, 0xFFFF, np.uint16)) for d in pair]
    copies = [d.from_numpy(np.zeros(n, np.uint16)) for d in pair]
    errors = []

    def rank(i):
        try:  # one thread per rank, no group
            comms[i].all_gather(sends[i], gathered[i], n, "bf16")
            comms[i].broadcast(sends[i], copies[i], n, "bf16", root=1)
            pair[i].synchronize()
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        assert np.array_equal(gathered[i].to_numpy(), np.concatenate(host)), seeded.where
        assert np.array_equal(copies[i].to_numpy(), host[1]), seeded.where
    # The devices' close destroys the communicators still alive.


@pytest.mark.backends("mock", "cpu")
def test_errors_in_a_group(pair):
    comms = comm.create_all(pair)
    with pytest.raises(ZeroDivisionError):
        comm.group(pair[0], lambda: 1 // 0)
    buf = pair[0].alloc(64)
    with pytest.raises(sparkrt.Error) as info:
        comms[0].all_reduce(buf, buf, 16, 99, "sum")  # no data type 99
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert comms[0].status() is None
    with pytest.raises(ValueError, match="bf16 data is uint16"):
        comm.data_type(np.uint16)
    with pytest.raises(ValueError, match="unknown reduce op"):
        comm.reduce_op("mean")
    assert comm.data_type_size("bf16") == 2 and comm.data_type_size("f32") == 4


def test_create_all_refuses_a_device_twice(backend):
    with sparkrt.Device.open(backend) as d:
        with pytest.raises(sparkrt.Error) as info:
            comm.create_all([d, d])
        assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
