"""Test selection and shared fixtures.

SPARKRT_TEST_BACKENDS (comma-separated; default: all of them) picks what runs:
  common  tests that open no device (library loading, struct layouts,
          argument conversion, bf16)
  mock    tests of the `backend` fixture on the recording mock
  cpu     the same tests on the cpu reference backend
  cuda    the same tests on the cuda backend, and the Triton tests
          (test_triton_gpu.py)
  vulkan  the same tests on the vulkan backend
Tests left out are deselected, not skipped, so a selection that matches
nothing fails (pytest exit code 5). On cuda and vulkan every test skips, with
the reason, when the backend opens no device. A test marked
`backends(...)` runs on those backends only: `backends("mock", "cpu")` where
it checks what only they do (the mock's records, the cpu's results, a second
device, a freed pointer refused).

On a GPU, by hand, from the repository root after building libsparkrt_c and
the backend (`ninja -C build sparkrt_c sparkrt_backend_cuda`):

    SPARKRT_TEST_BACKENDS=cuda SPARKRT_C_LIBRARY=build/lib/libsparkrt_c.so.0 \
        PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
        python3 -m pytest -q -rs -p no:cacheprovider python/tests

SPARKRT_TEST_SEED=<n> replays a randomized test with the seed its failure
message printed.
"""
import functools
import os
import secrets

import numpy as np
import pytest

import sparkrt

HOST_BACKENDS = ("mock", "cpu")
GPU_BACKENDS = ("cuda", "vulkan")
DEVICE_BACKENDS = HOST_BACKENDS + GPU_BACKENDS
KINDS = ("common",) + DEVICE_BACKENDS

# A collective whose peer never comes fails after this long instead of the
# default five minutes.
os.environ.setdefault("SPARKRT_COLLECTIVE_TIMEOUT_S", "60")


def selected_kinds():
    env = os.environ.get("SPARKRT_TEST_BACKENDS", "")
    if not env.strip():
        return set(KINDS)
    kinds = {k.strip() for k in env.split(",") if k.strip()}
    unknown = kinds - set(KINDS)
    if unknown:
        raise pytest.UsageError(f"SPARKRT_TEST_BACKENDS: unknown {sorted(unknown)}; "
                                f"known: {', '.join(KINDS)}")
    return kinds


# Importing torch and Triton takes seconds: only when the GPU tests run.
collect_ignore = [] if "cuda" in selected_kinds() else ["test_triton_gpu.py"]


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs the cuda backend, torch or Triton")
    config.addinivalue_line("markers", "backends(*names): run only on these backends")


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("backend", only.args if only else DEVICE_BACKENDS, indirect=True)


def pytest_collection_modifyitems(config, items):
    kinds = selected_kinds()
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            kind = "cuda"
        elif hasattr(item, "callspec") and "backend" in item.callspec.params:
            kind = item.callspec.params["backend"]
        else:
            kind = "common"
        (keep if kind in kinds else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class Seeded:
    """A seeded numpy Generator; `where` goes into assertion messages."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.where = f"seed {seed} (SPARKRT_TEST_SEED={seed} replays it)"


@pytest.fixture
def seeded(request):
    env = os.environ.get("SPARKRT_TEST_SEED")
    seed = int(env) if env else secrets.randbits(32)
    request.node.sparkrt_seed = seed
    return Seeded(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "sparkrt_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("sparkrt seed", f"SPARKRT_TEST_SEED={seed} replays this test"))


@functools.lru_cache(maxsize=None)
def _no_device_reason(backend):
    """Why `backend` opens no device here, or None when it opens one (asked
    once per session)."""
    try:
        sparkrt.Device.open(backend).close()
    except sparkrt.Error as e:
        return f"the {backend} backend has no usable device here: {e}"
    return None


@pytest.fixture
def backend(request):
    """The backend's name; a GPU backend without a device skips the test."""
    name = request.param
    if name in GPU_BACKENDS:
        reason = _no_device_reason(name)
        if reason:
            pytest.skip(reason)
    return name


@pytest.fixture
def dev(backend):
    """An open device of `backend`, closed after the test."""
    with sparkrt.Device.open(backend) as d:
        yield d
