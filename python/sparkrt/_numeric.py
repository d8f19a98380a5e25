"""bf16 on the host: numpy has no bf16 type, so bf16 data is uint16 bits,
converted as sparkrt/numeric.h (and the kernels) convert."""
import numpy as np


def bf16_from_f32(x) -> np.ndarray:
    """The bf16 bits (uint16, same shape) of `x` rounded to float32 and then
    to the nearest bf16, ties to even; any NaN becomes 0x7fff, as
    sparkrt::numeric::f32_to_bf16 does."""
    f = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(f).reshape(-1).view(np.uint32)  # 1-d: array, not scalar, maths
    # Just under half an ulp plus the kept lsb: ties go to even, and a carry
    # into the exponent rounds up to the next binade or to infinity.
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    out[nan] = 0x7FFF
    return out.reshape(f.shape)


def bf16_to_f32(b) -> np.ndarray:
    """float32 values (exact) of bf16 bits given as uint16."""
    b = np.asarray(b)
    if b.dtype != np.uint16:
        raise TypeError(f"bf16_to_f32: expected uint16 bf16 bits, got {b.dtype}")
    wide = b.reshape(-1).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32).reshape(b.shape)


def round_bf16(x) -> np.ndarray:
    """`x` rounded to bf16 and back, as float32."""
    return bf16_to_f32(bf16_from_f32(x))
