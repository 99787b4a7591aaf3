"""RFC 8785 (JCS) canonical JSON, byte for byte as the service writes it with JavaScript.

A leaf's hash and a checkpoint's signature cover these bytes, so one character written otherwise
than JSON.stringify writes it makes a correct log fail to verify. Python's own json.dumps differs
in three places: numbers (1.0 is "1.0" there, 1e-07 "1e-07"), key order (code points, where JCS
sorts by UTF-16 code units, which differ for characters outside the BMP) and escapes
(ensure_ascii, upper-case hex).
"""

from __future__ import annotations

import math
import re
from typing import Any, List, Mapping

# JavaScript numbers are IEEE 754 doubles: an integer beyond 2**53 is not one the service could
# hold, so it is written as the double JSON.parse would make of it.
_EXACT_INTEGER = 2**53

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

# A surrogate pair (two code points, as a str built by hand may hold one) is the character it
# encodes; a lone surrogate, which json.loads keeps from a "\udXXX" escape, is written as that
# escape, as JSON.stringify does since ES2019.
_NEEDS_CARE = re.compile('[\ud800-\udbff][\udc00-\udfff]|["\\\\\x00-\x1f\ud800-\udfff]')


def canonical_json(value: Any) -> str:
    """The JCS text of a JSON value (dict, list or tuple, str, int, float, bool, None): what the
    service hashes and signs. Encode it as UTF-8 for the bytes. NaN, the infinities and
    non-string keys are a ValueError or TypeError, as JCS has no text for them."""
    parts: List[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, parts: List[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_string(value))
    elif isinstance(value, int):
        parts.append(_integer(value))
    elif isinstance(value, float):
        parts.append(_number(value))
    elif isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise TypeError("JSON object keys are strings, not %s" % type(key).__name__)
        parts.append("{")
        for i, key in enumerate(sorted(value, key=_utf16_units)):
            if i:
                parts.append(",")
            parts.append(_string(key))
            parts.append(":")
            _write(value[key], parts)
        parts.append("}")
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for i, item in enumerate(value):
            if i:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    else:
        raise TypeError("%s is not a JSON value" % type(value).__name__)


def _utf16_units(key: str) -> bytes:
    """A sort key that orders strings by their UTF-16 code units, as JavaScript's sort() does:
    big-endian UTF-16 compares byte by byte exactly as its units compare one by one."""
    return key.encode("utf-16-be", "surrogatepass")


def _string(text: str) -> str:
    return '"' + _NEEDS_CARE.sub(_escape, text) + '"'


def _escape(match: "re.Match[str]") -> str:
    found = match.group()
    if len(found) == 2:
        return chr(0x10000 + ((ord(found[0]) - 0xD800) << 10) + (ord(found[1]) - 0xDC00))
    return _SHORT_ESCAPES.get(found) or "\\u%04x" % ord(found)


def _integer(value: int) -> str:
    if -_EXACT_INTEGER <= value <= _EXACT_INTEGER:
        return str(value)
    try:
        return _number(float(value))
    except OverflowError:
        raise ValueError("%d is beyond the range of a JSON number (an IEEE 754 double)" % value) from None


def _number(value: float) -> str:
    """ECMAScript's Number::toString: the shortest digits that read back as the same double (the
    digits of Python's repr, which are those), laid out by the ECMAScript rules."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError("%r has no JSON text (JCS, RFC 8785 section 3.2.2.3)" % value)
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + _number(-value)
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    stripped = digits.lstrip("0")
    # value = 0.<digits> * 10**point
    point = len(whole) + int(exponent or 0) - (len(digits) - len(stripped))
    digits = stripped.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        return digits + "0" * (point - count)
    if 0 < point <= 21:
        return digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return "0." + "0" * -point + digits
    power = point - 1
    sign = "+" if power >= 0 else "-"
    head = digits if count == 1 else digits[0] + "." + digits[1:]
    return "%se%s%d" % (head, sign, abs(power))
