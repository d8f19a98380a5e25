"""sparkrt.trace on the mock: a traced launch is in the JSON with its host span
and its device span, and the failures raise sparkrt.Error with the runtime's
code and message. The trace is the process's, so each test leaves none
running."""
import json

import numpy as np
import pytest

import sparkrt
from sparkrt import StatusCode

pytestmark = pytest.mark.backends("mock")


@pytest.fixture
def no_trace(backend):
    """The mock's backend, with no trace running before or after the test."""
    assert not sparkrt.trace.enabled(), "a trace already runs (is SPARKRT_TRACE set?)"
    yield backend
    if sparkrt.trace.enabled():
        try:
            sparkrt.trace.stop()
        finally:
            pytest.fail("the test left a trace running")


def _complete(path, name):
    """The complete events named `name`: (host spans, device spans)."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["name"] == name]
    return [e for e in spans if e["pid"] == 1], [e for e in spans if e["pid"] != 1]


def test_a_traced_launch_has_host_and_device_spans(no_trace, tmp_path):
    path = tmp_path / "launch.json"
    n = 1000
    with sparkrt.Device.open(no_trace) as dev:
        a = dev.from_numpy(np.arange(n, dtype=np.float32))
        b = dev.empty(n, np.float32)
        c = dev.empty(n, np.float32)
        add = dev.kernel("vector_ops", "vector_add_f32")
        with dev.stream() as s, sparkrt.trace.tracing(path) as traced:
            assert traced == path
            assert sparkrt.trace.enabled()
            add.launch(grid=(n + 255) // 256, block=256, args=[a, b, c, n], stream=s)
            s.synchronize()
            stream = s.handle
        assert not sparkrt.trace.enabled()
        # Closed after the trace: not in it.

    host, device = _complete(path, "vector_add_f32")
    assert len(host) == 1, f"host spans of the launch in {path}: {host}"
    assert host[0]["cat"] == "launch"
    args = host[0]["args"]
    assert (args["module"], args["entry"]) == ("vector_ops", "vector_add_f32")
    assert (args["grid"], args["block"], args["stream"]) == ([4, 1, 1], [256, 1, 1], stream)
    assert args["failed"] is False
    assert len(device) == 1, f"device spans of the launch in {path}: {device}"
    assert device[0]["tid"] == stream
    assert device[0]["args"]["module"] == "vector_ops"
    assert device[0]["ts"] >= host[0]["ts"]  # queued before the device ran it
    assert _complete(path, "device_close") == ([], [])


def test_start_stop_enabled_and_one_trace_at_a_time(no_trace, tmp_path):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    sparkrt.trace.start(first)
    try:
        assert sparkrt.trace.enabled()
        with pytest.raises(sparkrt.Error) as e:
            sparkrt.trace.start(str(second))
        assert e.value.code == StatusCode.FAILED_PRECONDITION
        assert str(first) in str(e.value)  # the trace that runs, and goes on
        assert sparkrt.trace.enabled()
        assert not second.exists()
    finally:
        sparkrt.trace.stop()
    assert not sparkrt.trace.enabled()
    with open(first, encoding="utf-8") as f:
        assert len(json.load(f)["traceEvents"]) == 1  # the process name only

    with pytest.raises(sparkrt.Error) as e:
        sparkrt.trace.stop()
    assert e.value.code == StatusCode.FAILED_PRECONDITION
    assert e.value.code_name == "FAILED_PRECONDITION"
    assert str(e.value) == "trace: no trace is running"


def test_a_file_that_cannot_be_written_is_not_found_naming_it(no_trace, tmp_path):
    missing = tmp_path / "no" / "such" / "folder" / "t.json"
    with pytest.raises(sparkrt.Error) as e:
        sparkrt.trace.start(missing)
    assert e.value.code == StatusCode.NOT_FOUND
    assert str(missing) in str(e.value)
    with pytest.raises(sparkrt.Error) as e:
        with sparkrt.trace.tracing(missing):
            pytest.fail("the body of a trace that did not start ran")
    assert e.value.code == StatusCode.NOT_FOUND
    assert not sparkrt.trace.enabled()


def test_bad_paths_are_refused_before_the_library(no_trace):
    with pytest.raises(TypeError):
        sparkrt.trace.start(None)
    with pytest.raises(ValueError, match="NUL"):
        sparkrt.trace.start("trace\0.json")
    assert not sparkrt.trace.enabled()


def test_tracing_raises_the_stop_error_when_the_body_did_not(no_trace):
    with sparkrt.Device.open(no_trace) as dev:
        with pytest.raises(sparkrt.Error) as e:
            with sparkrt.trace.tracing("/dev/full"):
                dev.empty(64, np.uint8)
        assert e.value.code == StatusCode.RESOURCE_EXHAUSTED
        assert "/dev/full" in str(e.value)
        assert not sparkrt.trace.enabled()

        # The body's exception wins over the failed stop, which still ends the trace.
        with pytest.raises(KeyError):
            with sparkrt.trace.tracing("/dev/full"):
                dev.empty(64, np.uint8)
                raise KeyError("from the body")
        assert not sparkrt.trace.enabled()


def test_ranges_nest_and_calls_inside_nest_under_them(no_trace, tmp_path):
    path = tmp_path / "ranges.json"
    with sparkrt.Device.open(no_trace) as dev:
        with sparkrt.trace.range("before the trace"):
            pass  # not recorded
        with sparkrt.trace.tracing(path):
            with sparkrt.trace.range("decode step"):
                with sparkrt.trace.range("layer 0"):
                    dev.empty(64, np.float32)
    (outer,), _ = _complete(path, "decode step")
    (inner,), _ = _complete(path, "layer 0")
    (alloc,), _ = _complete(path, "alloc")
    assert _complete(path, "before the trace") == ([], [])
    assert outer["cat"] == inner["cat"] == "user"
    assert outer["ts"] <= inner["ts"] <= alloc["ts"]
    assert alloc["ts"] + alloc["dur"] <= inner["ts"] + inner["dur"] + 0.002
    assert inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 0.002
    with pytest.raises(ValueError):
        with sparkrt.trace.range("a\0b"):
            pass


def test_host_spans_only_leave_the_device_tracks_out(no_trace, tmp_path):
    path = tmp_path / "host_only.json"
    n = 256
    with sparkrt.Device.open(no_trace) as dev:
        a = dev.from_numpy(np.ones(n, dtype=np.float32))
        add = dev.kernel("vector_ops", "vector_add_f32")
        with dev.stream() as s, sparkrt.trace.tracing(path, device_times=False):
            add.launch(grid=1, block=256, args=[a, a, a, n], stream=s)
            s.synchronize()
    host, device = _complete(path, "vector_add_f32")
    assert len(host) == 1 and device == []
