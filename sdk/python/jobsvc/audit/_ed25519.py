"""Ed25519 signature verification (RFC 8032, section 5.1), on the standard library alone.

The SDK has no dependency, and Python's standard library has no Ed25519, so the group law is
written out here. Verification only needs public data, so nothing here has to run in constant
time. Points are kept in extended homogeneous coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z and
x*y = T/Z, where the RFC's addition formulas need no inversion and hold for every pair of points
(doubling included).
"""

from __future__ import annotations

import hashlib
from typing import Optional, Tuple

P = 2**255 - 19
"""The field's prime."""
L = 2**252 + 27742317777372353535851937790883648493
"""The order of the base point: a signature's S must be below it (RFC 8032 section 5.1.7)."""
_D = -121665 * pow(121666, P - 2, P) % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = Tuple[int, int, int, int]

NEUTRAL: Point = (0, 1, 1, 0)


def point_add(p: Point, q: Point) -> Point:
    """RFC 8032 section 5.1.4's addition (complete: it also doubles)."""
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * _D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def scalar_multiply(scalar: int, point: Point) -> Point:
    """[scalar]point by doubling and adding, lowest bit first."""
    result = NEUTRAL
    while scalar > 0:
        if scalar & 1:
            result = point_add(result, point)
        point = point_add(point, point)
        scalar >>= 1
    return result


def points_equal(p: Point, q: Point) -> bool:
    """Projective equality: x1/z1 = x2/z2 and y1/z1 = y2/z2, without inverting."""
    return (p[0] * q[2] - q[0] * p[2]) % P == 0 and (p[1] * q[2] - q[1] * p[2]) % P == 0


def encode_point(point: Point) -> bytes:
    """RFC 8032 section 5.1.2: y little-endian, the low bit of x in the top bit."""
    z_inverse = pow(point[2], P - 2, P)
    x = point[0] * z_inverse % P
    y = point[1] * z_inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _recover_x(y: int, sign: int) -> Optional[int]:
    """The x of the curve point with this y whose low bit is sign, or None where there is none
    (RFC 8032 section 5.1.3, steps 2 to 4)."""
    u = (y * y - 1) % P
    v = (_D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if (v * x * x - u) % P != 0:
        if (v * x * x + u) % P != 0:
            return None  # u/v has no square root: y is on no point of the curve
        x = x * _SQRT_M1 % P
    if x == 0 and sign == 1:
        return None  # -0 is no encoding of 0: a second encoding of one point is refused
    if x & 1 != sign:
        x = P - x
    return x


def decode_point(encoded: bytes) -> Optional[Point]:
    """The point of a 32-byte encoding, or None for an invalid one: a y at or above p (a second,
    non-canonical encoding) or a y with no x on the curve."""
    if len(encoded) != 32:
        return None
    number = int.from_bytes(encoded, "little")
    y = number & ((1 << 255) - 1)
    if y >= P:
        return None
    x = _recover_x(y, number >> 255)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


BASE: Point = decode_point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))  # type: ignore[assignment]
"""The base point B: y = 4/5, x even."""


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether signature is a valid Ed25519 (pure) signature of message by public_key (RFC 8032
    section 5.1.7). A public key that is not a valid point encoding is a ValueError, as it is a
    broken key rather than a bad signature; any fault of the signature is False: its length, R not
    a point, or S not below L (a second S for the same signature would make it malleable)."""
    key = decode_point(public_key) if len(public_key) == 32 else None
    if key is None:
        raise ValueError("not an Ed25519 public key (32 bytes encoding a curve point)")
    if len(signature) != 64:
        return False
    r_point = decode_point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if r_point is None or s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % L
    return points_equal(scalar_multiply(s, BASE), point_add(r_point, scalar_multiply(k, key)))
