"""GPU tests: a Triton kernel's PTX loaded by name and launched through
sparkrt on torch tensors, and DeviceArray handed to torch without a copy.

Skipped (with the reason) unless the cuda backend opens a device and torch
and Triton import. By hand, from the repository root after building
libsparkrt_c (`ninja -C build sparkrt_c sparkrt_backend_cuda`):

    SPARKRT_C_LIBRARY=build/lib/libsparkrt_c.so.0 PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
        python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_triton_gpu.py
"""
import numpy as np
import pytest

import sparkrt

pytestmark = pytest.mark.cuda

MODULE = "sparkrt_py_triton_scale_add"  # the PTX file's stem: the module name


def _imports(triton=True):
    """torch and (with `triton`) the module holding the Triton kernel, or a
    skip saying what is missing. Imported here, not at the top, so that the
    tests exist (and are reported skipped) where they cannot run."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
        kernels = None
        if triton:
            import triton_kernels as kernels  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        pytest.skip(f"torch{' and Triton' if triton else ''} needed: {e}")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch, kernels


def _open_cuda():
    try:
        return sparkrt.Device.open("cuda")
    except sparkrt.Error as e:
        pytest.skip(f"the cuda backend has no usable device here: {e}")


def _compile(torch, kernels, n, block):
    """Compiles (and runs once, through Triton) out = x * scale + y, returning
    the compiled kernel and the tensors of that run."""
    gen = torch.Generator(device="cuda").manual_seed(20261204)
    x = torch.randn(n, device="cuda", generator=gen)
    y = torch.randn(n, device="cuda", generator=gen)
    out = torch.full((n,), float("nan"), device="cuda")
    scale = 0.7310585
    grid = ((n + block - 1) // block,)
    # Triton 3.x returns the CompiledKernel from a launch; warmup() compiles
    # without launching where a launch returns nothing.
    compiled = kernels.scale_add[grid](x, y, out, n, scale, BLOCK=block)
    if compiled is None or not hasattr(compiled, "asm"):
        compiled = kernels.scale_add.warmup(x, y, out, n, scale, BLOCK=block, grid=grid)
    torch.cuda.synchronize()
    return compiled, (x, y, out, scale, grid)


class _CudaArrayOnly:
    """Exposes nothing but __cuda_array_interface__ (as CuPy or Numba do)."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def test_triton_ptx_launched_through_sparkrt(tmp_path, monkeypatch):
    torch, kernels = _imports()
    n, block = 100003, 1024  # n off the block grid, and not 1 (Triton would fold it)
    compiled, (x, y, triton_out, scale, grid) = _compile(torch, kernels, n, block)
    ptx = compiled.asm["ptx"]
    entry = compiled.metadata.name
    (tmp_path / f"{MODULE}.ptx").write_text(ptx)
    monkeypatch.setenv("SPARKRT_KERNEL_PATH", str(tmp_path))  # before the device opens

    dev = _open_cuda()
    try:
        k = dev.kernel(MODULE, entry)
        info = k.info
        assert info.unsupported == "", info.unsupported
        types = [p.type_name for p in info.params]
        assert types[:5] == [".u64", ".u64", ".u64", ".u32", ".f32"], str(info)
        # Triton >= 3.3 appends scratch pointers (global, profile) it does not
        # use here: null for every extra declared parameter.
        extra = [None] * (len(info.params) - 5)
        assert all(t == ".u64" for t in types[5:]), str(info)

        out = torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        k.launch(grid, 32 * compiled.metadata.num_warps,
                 [x, sparkrt.ptr(y), _CudaArrayOnly(out), n, scale] + extra,
                 shared_mem=compiled.metadata.shared)
        dev.synchronize()
        assert torch.equal(out, triton_out), "sparkrt's launch differs from Triton's own"
        want = x * scale + y
        torch.testing.assert_close(out, want, rtol=2e-7, atol=1e-6)
    finally:
        dev.close()


def test_device_array_is_shared_with_torch_without_a_copy():
    torch, _ = _imports(triton=False)
    dev = _open_cuda()
    try:
        host = np.arange(1000, dtype=np.float32) * 0.5
        a = dev.from_numpy(host)
        cai = a.__cuda_array_interface__
        assert cai["version"] == 3 and cai["typestr"] == "<f4" and cai["shape"] == (1000,)
        assert cai["data"] == (a.ptr, False) and cai["strides"] is None
        t = torch.as_tensor(a, device="cuda")
        assert t.data_ptr() == a.ptr
        assert t.dtype == torch.float32 and tuple(t.shape) == (1000,)
        assert torch.equal(t.cpu(), torch.from_numpy(host))
        t.mul_(2)  # written through torch, read through sparkrt
        torch.cuda.synchronize()
        assert np.array_equal(a.to_numpy(), host * 2)
        # A DeviceArray is accepted as a launch argument next to tensors.
        assert sparkrt.device_pointer(t) == sparkrt.device_pointer(a) == a.ptr
    finally:
        dev.close()

