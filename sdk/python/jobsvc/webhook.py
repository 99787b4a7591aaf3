"""Verification of the service's webhook signatures (spec, Outbound webhooks)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any, Dict, Iterable, Optional, Union


class WebhookVerificationError(Exception):
    """code: missing_signature, malformed_signature, timestamp_out_of_tolerance or invalid_signature."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
# ASCII digits only: str.isdigit() and int() also take other scripts' digits (and int() spaces,
# underscores and signs), which the signed "<t>." bytes could never hold.
_TIMESTAMP = re.compile(r"[0-9]+")


def verify_webhook(
    raw_body: Union[bytes, bytearray, memoryview, str],
    signature_header: Optional[str],
    secrets: Union[str, Iterable[str]],
    tolerance_seconds: float = 300,
    now: Optional[float] = None,
) -> Dict[str, Any]:
    """Checks the X-Service-Signature header (t=<seconds>,v1=<hex>[,v1=<hex>]: HMAC-SHA256 of
    "<t>.<raw body>") against one secret or several, and returns the parsed event. Any v1 value
    matching any secret is enough (both sign during a rotation); digests compare in constant time.
    An empty secret (or none) is a ValueError: anyone can sign with the empty key."""
    keys = [secrets] if isinstance(secrets, str) else list(secrets or [])
    if not keys or any(not isinstance(secret, str) or secret == "" for secret in keys):
        raise ValueError("secrets must be one or more non-empty strings (the subscription secret)")
    if not signature_header:
        raise WebhookVerificationError("missing_signature", "no X-Service-Signature header")
    timestamp: Optional[str] = None
    digests = []
    for part in signature_header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            timestamp = value
        elif key == "v1" and _DIGEST.fullmatch(value):
            digests.append(value.lower())
    if timestamp is None or not _TIMESTAMP.fullmatch(timestamp) or not digests:
        raise WebhookVerificationError("malformed_signature", "the header needs t=<seconds> and at least one v1=<hex digest>")
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance_seconds:
        raise WebhookVerificationError("timestamp_out_of_tolerance", "the timestamp is more than %s s from now" % tolerance_seconds)
    body = raw_body.encode("utf-8") if isinstance(raw_body, str) else bytes(raw_body)
    matched = False
    for secret in keys:
        expected = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
        for digest in digests:
            # Every pair is compared, so the time taken does not tell which one matched.
            matched = hmac.compare_digest(expected, digest) or matched
    if not matched:
        raise WebhookVerificationError("invalid_signature", "no v1 signature matches the given secrets")
    return json.loads(body.decode("utf-8"))
