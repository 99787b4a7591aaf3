"""What test_audit.py verifies, made here the way the service makes it (docs/audit.md): Merkle
trees and their proofs straight from RFC 9162's definitions (MTH, PATH, SUBPROOF), Ed25519
signing from RFC 8032 section 5.1.6 (for tests only: it is not constant-time, and the SDK never
signs), signed checkpoints, keys documents and attested exports with their signed manifests."""

import base64
import hashlib
import json

from jobsvc.audit import _ed25519, checkpoint_message, leaf_hash, manifest_message, node_hash
from jobsvc.audit._merkle import EMPTY_ROOT, largest_power_of_two_below

PROJECT = "prj_01HAUDITTEST"


class Tree:
    """A tree over leaf hashes, with MTH of any range memoised (the property tests ask for the
    same subtrees again and again)."""

    def __init__(self, hashes):
        self.hashes = list(hashes)
        self._memo = {}

    @classmethod
    def of_leaves(cls, leaves):
        return cls(leaf_hash(leaf) for leaf in leaves)

    def mth(self, start, end):
        """MTH(D[start:end]), RFC 6962 section 2.1."""
        if end == start:
            return EMPTY_ROOT
        if end - start == 1:
            return self.hashes[start]
        if (start, end) not in self._memo:
            k = largest_power_of_two_below(end - start)
            self._memo[(start, end)] = node_hash(self.mth(start, start + k), self.mth(start + k, end))
        return self._memo[(start, end)]

    def root(self, size):
        return self.mth(0, size)

    def inclusion_path(self, index, size, start=0):
        """PATH(m, D[n]), RFC 9162 section 2.1.3.1, over D[start:start + size]."""
        if size <= 1:
            return []
        k = largest_power_of_two_below(size)
        if index < k:
            return self.inclusion_path(index, k, start) + [self.mth(start + k, start + size)]
        return self.inclusion_path(index - k, size - k, start + k) + [self.mth(start, start + k)]

    def consistency_path(self, first, second):
        """PROOF(m, D[n]) = SUBPROOF(m, D[n], true), RFC 9162 section 2.1.4.1."""
        return self._subproof(first, 0, second, True)

    def _subproof(self, m, start, end, whole):
        n = end - start
        if m == n:
            return [] if whole else [self.mth(start, end)]
        k = largest_power_of_two_below(n)
        if m <= k:
            return self._subproof(m, start, start + k, whole) + [self.mth(start + k, end)]
        return self._subproof(m - k, start + k, end, False) + [self.mth(start, start + k)]

    def multi_leaf_proof(self, size, indices):
        """The manifest's proof for the leaves at indices: every range the recursion visits that
        holds none of them (docs/audit.md, Attested exports)."""
        indices = set(indices)
        ranges = []

        def visit(start, end):
            if not any(start <= i < end for i in indices):
                ranges.append((start, end, self.mth(start, end)))
            elif end - start > 1:
                k = largest_power_of_two_below(end - start)
                visit(start, start + k)
                visit(start + k, end)

        if size:
            visit(0, size)
        return ranges


def public_key(seed):
    """RFC 8032 section 5.1.5: A = [s]B, s the clamped first half of SHA-512(seed)."""
    return _ed25519.encode_point(_ed25519.scalar_multiply(_secret_scalar(seed), _ed25519.BASE))


def _secret_scalar(seed):
    low = int.from_bytes(hashlib.sha512(seed).digest()[:32], "little")
    return (low & ((1 << 254) - 8)) | (1 << 254)


def sign(seed, message):
    """RFC 8032 section 5.1.6, for tests only."""
    digest = hashlib.sha512(seed).digest()
    s = _secret_scalar(seed)
    a = public_key(seed)
    r = int.from_bytes(hashlib.sha512(digest[32:] + message).digest(), "little") % _ed25519.L
    big_r = _ed25519.encode_point(_ed25519.scalar_multiply(r, _ed25519.BASE))
    k = int.from_bytes(hashlib.sha512(big_r + a + message).digest(), "little") % _ed25519.L
    return big_r + ((r + k * s) % _ed25519.L).to_bytes(32, "little")


class Signer:
    """A signing key of the log (checkpoints, export manifests) with its entry in the keys document."""

    def __init__(self, label, valid_from="2026-01-01T00:00:00.000Z", valid_until=None):
        self.seed = hashlib.sha256(("jobsvc-audit-test:" + label).encode()).digest()
        self.public_key = public_key(self.seed)
        self.key_id = hashlib.sha256(self.public_key).hexdigest()[:16]
        self.entry = {
            "key_id": self.key_id,
            "algorithm": "Ed25519",
            "public_key": base64.b64encode(self.public_key).decode(),
            "valid_from": valid_from,
            "valid_until": valid_until,
        }

    def checkpoint(self, tree, size, issued_at="2026-06-01T12:00:00.000Z", project_id=PROJECT):
        unsigned = {"project_id": project_id, "tree_size": size, "root_hash": tree.root(size).hex(), "issued_at": issued_at, "key_id": self.key_id}
        return resign(self, unsigned)


def resign(signer, checkpoint):
    """The checkpoint (altered or not) with a fresh signature by signer: what an attacker holding
    the key could make."""
    signed = dict(checkpoint, key_id=signer.key_id)
    signed["signature"] = base64.b64encode(sign(signer.seed, checkpoint_message(signed))).decode()
    return signed


def sign_manifest(signer, manifest, signed_at=None):
    """The manifest (altered or not) signed by signer at signed_at (by default the time it says,
    else its checkpoint's issued_at), as the service signs it: what an attacker holding the key
    could make too."""
    unsigned = {name: value for name, value in manifest.items() if name != "signature"}
    if signed_at is None:
        signed_at = manifest["signed_at"] if "signed_at" in manifest else manifest["checkpoint"]["issued_at"]
    unsigned.update(signed_at=signed_at, key_id=signer.key_id)
    return dict(unsigned, signature=base64.b64encode(sign(signer.seed, manifest_message(unsigned))).decode())


def keys_document(*signers):
    return {"data": [signer.entry for signer in signers]}


def events(count, project_id=PROJECT):
    """count leaf objects of one project: jobs with their events, and text and numbers that JCS
    writes otherwise than json.dumps (floats, non-BMP characters, escapes)."""
    made = []
    for i in range(count):
        job = "job_%04d" % (i // 3)
        step = i % 3
        made.append(
            {
                "aggregate": "job",
                "aggregate_id": job,
                "data": {"payload": {"to": "u%d@example.com" % i, "score": i / 4, "big": 1e21 * (i + 1), "note": "caf\u00e9 \U0001F600 \t#%d" % i}}
                if step == 0
                else {"attempt": step, "progress": step / 3.0},
                "id": "evt_%026d" % i,
                "occurred_at": "2026-05-01T00:%02d:%02d.000Z" % (i // 60 % 60, i % 60),
                "project_id": project_id,
                "type": ["job_created", "job_started", "job_succeeded"][step],
            }
        )
    return made


def export_lines(kind, leaves, indices, checkpoint, tree, signer, unattested=0, signed_at=None):
    """An attested export's NDJSON lines: one row per chosen leaf (audit_log) or per job whose
    job_created is chosen (jobs, with its created and latest leaves below the checkpoint's size),
    unattested rows with null leaves, then the manifest, signed by signer at signed_at (by default
    when the checkpoint was issued)."""
    size = checkpoint["tree_size"]
    rows, named = [], set()
    if kind == "audit_log":
        for index in indices:
            rows.append({"id": "act_%d" % index, "kind": leaves[index]["type"], "summary": "row %d" % index, "leaf_index": index, "leaf": leaves[index]})
            named.add(index)
        rows += [{"id": "act_account_%d" % i, "kind": "user_signed_in", "leaf_index": None, "leaf": None} for i in range(unattested)]
    else:
        for index in indices:
            job = leaves[index]["aggregate_id"]
            latest = max(i for i in range(size) if leaves[i]["aggregate_id"] == job)
            rows.append(
                {
                    "id": job,
                    "state": "succeeded",
                    "attestation": {"created": {"leaf_index": index, "leaf": leaves[index]}, "latest": {"leaf_index": latest, "leaf": leaves[latest]}},
                }
            )
            named.update((index, latest))
    proof = [{"start": start, "end": end, "hash": digest.hex()} for start, end, digest in tree.multi_leaf_proof(size, named)]
    manifest = {
        "version": 1,
        "project_id": checkpoint["project_id"],
        "kind": kind,
        "from": "2026-05-01T00:00:00.000Z",
        "until": "2026-05-02T00:00:00.000Z",
        "checkpoint": checkpoint,
        "lines": len(rows),
        "leaves": sorted(named),
        "proof": proof,
    }
    manifest = sign_manifest(signer, manifest, signed_at)
    return [json.dumps(row, ensure_ascii=False) for row in rows] + [json.dumps({"manifest": manifest})]
