"""RFC 6962 hashes and the verification of RFC 9162 inclusion and consistency proofs, and of the
multi-leaf proof of an attested export (docs/audit.md).

Every index a proof names is checked before it is used: a verifier that let a path run past the
tree, or took an empty proof between two different trees, accepts forgeries (immudb shipped one
that accepted a forged consistency proof, GHSA-672p-m5jq-mrh8).
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any, Dict, List, Mapping, Sequence, Set, Tuple, Union

from ._jcs import canonical_json

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH({}): the root of the empty tree."""


class AuditVerificationError(Exception):
    """What failed, in words (reason): raised by every verification here; nothing is accepted
    without one passing in full."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def leaf_hash(leaf: Union[bytes, Mapping[str, Any]]) -> bytes:
    """SHA-256(0x00 || leaf bytes) (RFC 6962 section 2.1). A leaf object (an event without cursor,
    state and leaf_index) is hashed as the UTF-8 of its JCS text, the leaf bytes the service hashed."""
    if isinstance(leaf, Mapping):
        leaf = canonical_json(leaf).encode("utf-8")
    elif not isinstance(leaf, (bytes, bytearray)):
        raise TypeError("a leaf is its bytes or a leaf object (a dict), not %s" % type(leaf).__name__)
    return hashlib.sha256(b"\x00" + bytes(leaf)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the 0x01 keeps an inner node from passing for a leaf."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def largest_power_of_two_below(n: int) -> int:
    """k of RFC 6962's MTH: the largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _size(name: str, value: Any) -> int:
    # bool is an int in Python, and True would pass for a tree of one leaf.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuditVerificationError("%s must be a whole number of 0 or more, not %r" % (name, value))
    return value


def _digest(name: str, value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != 32:
        raise AuditVerificationError("%s must be a 32-byte SHA-256 hash" % name)
    return bytes(value)


def verify_inclusion(leaf_digest: bytes, leaf_index: int, tree_size: int, inclusion_path: Sequence[bytes], root_hash: bytes) -> None:
    """Checks that the leaf with hash leaf_digest is at leaf_index in the tree of tree_size leaves
    whose root is root_hash, RFC 9162 section 2.1.3.2 step by step. Raises AuditVerificationError."""
    leaf_index = _size("leaf_index", leaf_index)
    tree_size = _size("tree_size", tree_size)
    path = [_digest("inclusion_path[%d]" % i, p) for i, p in enumerate(inclusion_path)]
    leaf_digest = _digest("the leaf hash", leaf_digest)
    root_hash = _digest("the root hash", root_hash)
    if leaf_index >= tree_size:
        raise AuditVerificationError("leaf %d is not in a tree of %d leaves" % (leaf_index, tree_size))
    fn, sn = leaf_index, tree_size - 1
    r = leaf_digest
    for p in path:
        if sn == 0:
            raise AuditVerificationError("the inclusion path is longer than a tree of %d leaves needs for leaf %d" % (tree_size, leaf_index))
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise AuditVerificationError("the inclusion path is shorter than a tree of %d leaves needs for leaf %d" % (tree_size, leaf_index))
    if r != root_hash:
        raise AuditVerificationError(
            "leaf %d and its inclusion path give the root %s, not %s: the leaf is not the one the tree holds there" % (leaf_index, r.hex(), root_hash.hex())
        )


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, consistency_path: Sequence[bytes]) -> None:
    """Checks that the tree of second leaves (root second_root) extends the tree of first leaves
    (root first_root), RFC 9162 section 2.1.4.2 step by step, after the cases the RFC's loop does
    not cover: first = 0 (nothing to prove: refused), first > second (the tree shrank) and
    first = second (the same tree: an empty path and equal roots). Raises AuditVerificationError."""
    first = _size("first", first)
    second = _size("second", second)
    path = [_digest("consistency_path[%d]" % i, p) for i, p in enumerate(consistency_path)]
    first_root = _digest("the first root", first_root)
    second_root = _digest("the second root", second_root)
    if first == 0:
        raise AuditVerificationError("first is 0: an empty tree is consistent with every tree, there is nothing to prove")
    if first > second:
        raise AuditVerificationError("tree shrank from %d to %d leaves: the newest events were truncated" % (first, second))
    if first == second:
        if path:
            raise AuditVerificationError("a consistency proof between two trees of %d leaves is empty, this one has %d hashes" % (first, len(path)))
        if first_root != second_root:
            raise AuditVerificationError(
                "the tree of %d leaves has two roots, %s and %s: the log was rewritten" % (first, first_root.hex(), second_root.hex())
            )
        return
    if not path:
        raise AuditVerificationError("the consistency path from %d to %d leaves is empty" % (first, second))
    if first & (first - 1) == 0:
        path = [first_root] + path
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise AuditVerificationError("the consistency path from %d to %d leaves is longer than the trees need" % (first, second))
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise AuditVerificationError("the consistency path from %d to %d leaves is shorter than the trees need" % (first, second))
    if fr != first_root:
        raise AuditVerificationError(
            "the consistency path gives %s as the root of the first %d leaves, not %s: the newer tree does not extend the older"
            % (fr.hex(), first, first_root.hex())
        )
    if sr != second_root:
        raise AuditVerificationError(
            "the consistency path gives %s as the root of %d leaves, not %s: the newer tree does not extend the older" % (sr.hex(), second, second_root.hex())
        )


Range = Tuple[int, int]


def root_from_multi_leaf_proof(tree_size: int, leaves: Mapping[int, bytes], proof: Sequence[Tuple[int, int, bytes]]) -> bytes:
    """The root of a tree of tree_size leaves computed from some of its leaves (index: leaf hash)
    and the hashes MTH(D[start:end]) of the ranges that hold none of them (proof: (start, end,
    hash)), as docs/audit.md's root(start, end) recursion defines. Refused (AuditVerificationError):
    a leaf at or beyond tree_size, a malformed or repeated range, a range that holds one of the
    leaves (it would hide it), a range the recursion never visits, and a leaf neither given nor
    covered. The caller compares the result with the checkpoint's root."""
    tree_size = _size("tree_size", tree_size)
    indices = sorted(leaves)
    for index in indices:
        _size("a leaf index", index)
        _digest("the hash of leaf %d" % index, leaves[index])
        if index >= tree_size:
            raise AuditVerificationError("leaf %d is at or beyond the checkpoint's tree_size %d" % (index, tree_size))
    ranges: Dict[Range, bytes] = {}
    for start, end, digest in proof:
        start, end = _size("a proof range's start", start), _size("a proof range's end", end)
        if not start < end <= tree_size:
            raise AuditVerificationError("proof range [%d, %d) is not a range of a tree of %d leaves" % (start, end, tree_size))
        if (start, end) in ranges:
            raise AuditVerificationError("proof range [%d, %d) is listed twice" % (start, end))
        held = bisect.bisect_left(indices, start)
        if held < len(indices) and indices[held] < end:
            raise AuditVerificationError("proof range [%d, %d) holds exported leaf %d: it would hide that leaf" % (start, end, indices[held]))
        ranges[(start, end)] = _digest("the hash of proof range [%d, %d)" % (start, end), digest)
    if tree_size == 0:
        if ranges:
            raise AuditVerificationError("the proof has ranges, but the tree is empty")
        return EMPTY_ROOT
    used: Set[Range] = set()

    def root(start: int, end: int) -> bytes:
        covered = ranges.get((start, end))
        if covered is not None:
            used.add((start, end))
            return covered
        if end - start == 1:
            if start in leaves:
                return leaves[start]
            raise AuditVerificationError("leaf %d is neither in the export nor covered by the proof" % start)
        k = largest_power_of_two_below(end - start)
        return node_hash(root(start, start + k), root(start + k, end))

    result = root(0, tree_size)
    unused: List[Range] = sorted(set(ranges) - used)
    if unused:
        raise AuditVerificationError("proof range [%d, %d) is not a range the tree's recursion visits" % unused[0])
    return result
