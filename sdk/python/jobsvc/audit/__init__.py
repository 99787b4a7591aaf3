"""Offline verification of a project's audit log (docs/audit.md): canonical leaf bytes (RFC 8785),
RFC 6962 hashes, Ed25519-signed checkpoints, RFC 9162 inclusion and consistency proofs, and
attested exports, whose signed manifests make a row taken out detectable. It trusts nothing but
the keys document (GET /jobsvc/v1/audit/keys) and makes no request: give it the documents you
saved. The same checks run from a shell as `python -m jobsvc.audit <command> ...`.

Every verify_* function raises AuditVerificationError, whose reason says what failed in words.
"""

from ._jcs import canonical_json
from ._merkle import (
    EMPTY_ROOT,
    AuditVerificationError,
    leaf_hash,
    node_hash,
    root_from_multi_leaf_proof,
    verify_consistency,
    verify_inclusion,
)
from ._verify import (
    ExportReport,
    checkpoint_message,
    leaf_object,
    manifest_message,
    verify_checkpoint,
    verify_checkpoint_consistency,
    verify_export,
    verify_leaf_inclusion,
)

__all__ = [
    "AuditVerificationError",
    "EMPTY_ROOT",
    "ExportReport",
    "canonical_json",
    "checkpoint_message",
    "leaf_hash",
    "leaf_object",
    "manifest_message",
    "node_hash",
    "root_from_multi_leaf_proof",
    "verify_checkpoint",
    "verify_checkpoint_consistency",
    "verify_consistency",
    "verify_export",
    "verify_inclusion",
    "verify_leaf_inclusion",
]
