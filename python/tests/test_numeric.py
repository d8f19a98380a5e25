"""bf16 conversions against an independent reference: the nearest of the two
bf16 neighbours of each float32, compared in float64, ties to the even code."""
import math

import numpy as np

import sparkrt


def _value(code):
    """float64 value of a non-NaN bf16 code, with the code after the largest
    finite one standing for 2^128 (where IEEE rounding overflows)."""
    sign = -1.0 if code & 0x8000 else 1.0
    mag = code & 0x7FFF
    if mag == 0x7F80:
        return sign * 2.0**128
    exponent, mantissa = mag >> 7, mag & 0x7F
    if exponent == 0:
        return sign * mantissa * 2.0**-133
    return sign * (128 + mantissa) * 2.0**(exponent - 134)


def _reference(f):
    """bf16 code of one float32 value."""
    if math.isnan(f):
        return 0x7FFF
    if math.isinf(f):
        return 0xFF80 if f < 0 else 0x7F80
    bits = int(np.float32(f).view(np.uint32))
    low = bits >> 16  # truncated towards zero
    high = low + 1    # next code away from zero
    x = float(f)
    d_low, d_high = abs(x - _value(low)), abs(_value(high) - x)
    if d_low < d_high or (d_low == d_high and low % 2 == 0):
        return low
    return high


def _interesting_floats(rng):
    bits = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    # Exact ties and their neighbours, at both lsb parities.
    ties = (rng.integers(0, 2**16, size=2000, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    edges = np.array([0, 0x80000000, 0x00000001, 0x00008000, 0x00018000, 0x7F7F7FFF, 0x7F7F8000,
                      0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00000, 0x3F808000,
                      0x3F818000, 0x3F807FFF, 0x007FFFFF, 0x00800000], dtype=np.uint32)
    return np.concatenate([bits, ties, ties - 1, ties + 1, edges]).view(np.float32)


def test_bf16_from_f32_rounds_to_nearest_even(seeded):
    with np.errstate(all="ignore"):
        f = _interesting_floats(seeded.rng)
        got = sparkrt.bf16_from_f32(f)
    assert got.dtype == np.uint16 and got.shape == f.shape
    want = np.array([_reference(float(x)) for x in f], dtype=np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (f"{bad.size} codes differ, first f32 bits "
                           f"{int(f.view(np.uint32)[bad[0]]):#010x}: got {int(got[bad[0]]):#06x}"
                           f", want {int(want[bad[0]]):#06x}; {seeded.where}")


def test_bf16_to_f32_is_exact_and_inverts_rounding(seeded):
    codes = seeded.rng.integers(0, 2**16, size=5000, dtype=np.uint64).astype(np.uint16)
    values = sparkrt.bf16_to_f32(codes)
    assert values.dtype == np.float32
    finite = ~np.isnan(values)
    want = np.array([_value(int(c)) if (int(c) & 0x7FFF) != 0x7F80 else math.copysign(
        math.inf, _value(int(c))) for c in codes[finite]])
    assert np.array_equal(values[finite].astype(np.float64), want), seeded.where
    assert np.array_equal(sparkrt.bf16_from_f32(values[finite]), codes[finite]), seeded.where


def test_shapes_and_scalars():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    assert sparkrt.bf16_from_f32(x).shape == (3, 4)
    assert sparkrt.bf16_to_f32(sparkrt.bf16_from_f32(x)).shape == (3, 4)
    assert int(sparkrt.bf16_from_f32(np.float32(-2.0))) == 0xC000
    assert float(sparkrt.round_bf16(1.0 + 2.0**-8 + 2.0**-20)) == 1.0 + 2.0**-7
