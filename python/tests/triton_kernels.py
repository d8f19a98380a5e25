"""The Triton kernel of test_triton_gpu.py, in a module of its own: it is
imported only where torch and Triton are installed."""
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    """out = x * scale + y over n elements, BLOCK per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + y, mask=mask)
