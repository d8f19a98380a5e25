"""Graphs: work captured on a stream, replayed with one call."""
import numpy as np
import pytest

import sparkrt
from sparkrt.testing import MockLaunch, mock_launches


@pytest.mark.backends("mock", "cpu")
def test_capture_and_replay(dev, backend, seeded):
    rng = seeded.rng
    n = int(rng.integers(1, 2000))
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db = dev.from_numpy(a), dev.from_numpy(b)
    out = dev.from_numpy(np.full(n, np.nan, np.float32))
    k = dev.kernel("vector_ops", "vector_add_f32")
    grid = (n + 255) // 256
    with dev.stream() as s:
        with dev.capture(s) as cap:
            k.launch(grid, 256, [da, db, out, n], stream=s)
        graph = cap.graph
        assert graph.num_nodes == 1
        s.synchronize()
        assert np.all(np.isnan(out.to_numpy())), "captured work must not run"
        if backend == "mock":
            assert mock_launches(dev) == []

        graph.launch(s)
        s.synchronize()
        if backend == "cpu":
            assert np.array_equal(out.to_numpy(), a + b), seeded.where
        # Same pointers, new contents: the replay reads them.
        a2 = rng.standard_normal(n, dtype=np.float32)
        da.copy_from(a2)
        graph.launch(s)
        s.synchronize()
        if backend == "cpu":
            assert np.array_equal(out.to_numpy(), a2 + b), seeded.where
        else:
            assert mock_launches(dev) == [MockLaunch("vector_ops", "vector_add_f32",
                                                     (grid, 1, 1), (256, 1, 1))] * 2
        graph.destroy()
        graph.destroy()
        with pytest.raises(ValueError, match="destroyed"):
            graph.launch(s)


def test_begin_and_end_capture(dev):
    out = dev.from_numpy(np.zeros(256, np.uint32))
    fill = dev.kernel("vector_ops", "fill_u32")
    s = dev.stream()
    dev.begin_capture(s)
    fill.launch(1, 256, [out, 5, 256], stream=s)
    fill.launch(1, 256, [out, 6, 128], stream=s)
    g = dev.end_capture(s)
    assert g.num_nodes == 2
    with g:
        g.launch(s)
        dev.synchronize(s)
    if dev.backend == "cpu":
        got = out.to_numpy()
        assert np.all(got[:128] == 6) and np.all(got[128:] == 5)


def test_capture_on_the_default_stream_is_refused(dev):
    with pytest.raises(sparkrt.Error) as info:
        with dev.capture(0):
            pass
    assert info.value.code == sparkrt.StatusCode.INVALID_ARGUMENT
    assert info.value.message


def test_a_failing_capture_block_ends_the_capture(dev):
    s = dev.stream()
    with pytest.raises(RuntimeError, match="inside"):
        with dev.capture(s):
            raise RuntimeError("inside")
    # The stream is usable (and capturable) again.
    with dev.capture(s) as cap:
        pass
    assert cap.graph.num_nodes == 0
