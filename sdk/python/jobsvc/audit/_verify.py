"""Verification of the audit log's documents as the service serves them (docs/audit.md):
checkpoints against the keys document, a leaf's inclusion, two checkpoints' consistency and
attested exports. Each takes the parsed JSON and raises AuditVerificationError with the reason.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

from . import _ed25519
from ._jcs import canonical_json
from ._merkle import EMPTY_ROOT, AuditVerificationError, leaf_hash, root_from_multi_leaf_proof, verify_consistency, verify_inclusion

JsonObject = Mapping[str, Any]

CHECKPOINT_PREFIX = b"jobsvc-audit-checkpoint-v1\n"
"""What the signed bytes of a checkpoint start with, so that they can mean nothing else."""

EXPORT_PREFIX = b"jobsvc-audit-export-v1\n"
"""What the signed bytes of an export's manifest start with: no checkpoint's bytes can pass for them."""

_HASH = re.compile(r"[0-9a-f]{64}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_UTC_MILLIS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# A leaf object's members; a feed event is the leaf object with the three others added
# (docs/audit.md, Leaves).
_LEAF_FIELDS = ("aggregate", "aggregate_id", "data", "id", "occurred_at", "project_id", "type")
_FEED_ONLY_FIELDS = ("cursor", "state", "leaf_index")


def _fail(reason: str) -> AuditVerificationError:
    return AuditVerificationError(reason)


def _object(what: str, value: Any) -> JsonObject:
    if not isinstance(value, Mapping):
        raise _fail("%s is not a JSON object" % what)
    return value


def _count(what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail("%s is not a whole number of 0 or more: %s" % (what, json.dumps(value)))
    return value


def _text(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail("%s is not a non-empty string: %s" % (what, json.dumps(value)))
    return value


def _hash(what: str, value: Any) -> bytes:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise _fail("%s is not a hash (64 lower-case hex characters): %s" % (what, json.dumps(value)))
    return bytes.fromhex(value)


def _instant(what: str, value: Any) -> decimal.Decimal:
    """Seconds since the epoch, exactly (fractions of any length), of an RFC 3339 time."""
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _fail("%s is not an RFC 3339 time: %s" % (what, json.dumps(value)))
    year, month, day, hour, minute, second, fraction, sign, offset_hours, offset_minutes = match.groups()
    try:
        moment = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=datetime.timezone.utc)
    except ValueError:
        raise _fail("%s is not an RFC 3339 time: %s" % (what, json.dumps(value))) from None
    seconds = decimal.Decimal((moment - _EPOCH) // datetime.timedelta(seconds=1))
    if fraction:
        seconds += decimal.Decimal("0." + fraction)
    if sign:
        offset = int(offset_hours) * 3600 + int(offset_minutes) * 60
        seconds -= offset if sign == "+" else -offset
    return seconds


def _base64(what: str, value: Any, size: int) -> bytes:
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or len(raw) != size:
        raise _fail("%s is not standard base64 of %d bytes" % (what, size))
    return raw


def checkpoint_message(checkpoint: JsonObject) -> bytes:
    """The bytes a checkpoint's signature covers: "jobsvc-audit-checkpoint-v1\\n" and the JCS of
    its issued_at, key_id, project_id, root_hash and tree_size (docs/audit.md, Checkpoints)."""
    signed = {name: checkpoint.get(name) for name in ("issued_at", "key_id", "project_id", "root_hash", "tree_size")}
    return CHECKPOINT_PREFIX + canonical_json(signed).encode("utf-8")


def manifest_message(manifest: JsonObject) -> bytes:
    """The bytes an export manifest's signature covers: "jobsvc-audit-export-v1\\n" and the JCS of
    the manifest without its signature (docs/audit.md, Attested exports): its lines count, leaves,
    proof, checkpoint, window, signed_at and key_id alike."""
    signed = {name: value for name, value in manifest.items() if name != "signature"}
    return EXPORT_PREFIX + canonical_json(signed).encode("utf-8")


def _keys_by_id(keys: Any) -> Dict[str, JsonObject]:
    entries = keys.get("data") if isinstance(keys, Mapping) else keys
    if not isinstance(entries, list):
        raise _fail("the keys document is not the answer of GET /jobsvc/v1/audit/keys (it has no data list)")
    found: Dict[str, JsonObject] = {}
    for i, entry in enumerate(entries):
        entry = _object("the keys document's entry %d" % i, entry)
        found[_text("the keys document's entry %d's key_id" % i, entry.get("key_id"))] = entry
    return found


def _describe_window(entry: JsonObject) -> str:
    until = entry.get("valid_until")
    return "valid from %s %s" % (entry.get("valid_from"), "until %s" % until if until is not None else "on (current)")


def _check_signature(what: str, signed: JsonObject, message: Callable[[JsonObject], bytes], time_name: str, verb: str, keys: Any) -> JsonObject:
    """The checks a signed statement of the log (a checkpoint, an export manifest) passes against
    the keys document: its key_id is listed, the listed key is the key of that id and an Ed25519
    key, the signature over message(signed) verifies with it, and the time in time_name (already
    checked for its form) is in the key's window. Returns the key's entry."""
    key_id = signed.get("key_id")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise _fail("the %s's key_id is not 16 lower-case hex characters: %s" % (what, json.dumps(key_id)))
    signature = _base64("the %s's signature" % what, signed.get("signature"), 64)
    listed = _keys_by_id(keys)
    entry = listed.get(key_id)
    if entry is None:
        raise _fail("%s signed by unknown key %s: the keys document lists %s" % (what, key_id, ", ".join(sorted(listed)) or "no key"))
    if entry.get("algorithm") != "Ed25519":
        raise _fail("key %s is listed with algorithm %s, not Ed25519" % (key_id, json.dumps(entry.get("algorithm"))))
    public_key = _base64("key %s's public_key" % key_id, entry.get("public_key"), 32)
    if hashlib.sha256(public_key).hexdigest()[:16] != key_id:
        raise _fail("key %s's public_key is not the key of that id (its SHA-256 starts %s)" % (key_id, hashlib.sha256(public_key).hexdigest()[:16]))
    try:
        verified = _ed25519.verify(public_key, message(signed), signature)
    except ValueError:
        raise _fail("key %s's public_key is not a valid Ed25519 public key" % key_id) from None
    if not verified:
        raise _fail("the %s's signature does not verify with key %s: the %s was altered, or that key did not sign it" % (what, key_id, what))
    at = _instant("the %s's %s" % (what, time_name), signed.get(time_name))
    valid_from = _instant("key %s's valid_from" % key_id, entry.get("valid_from"))
    valid_until = entry.get("valid_until")
    if at < valid_from or (valid_until is not None and at >= _instant("key %s's valid_until" % key_id, valid_until)):
        raise _fail("%s %s at %s, outside the window of key %s (%s)" % (what, verb, signed[time_name], key_id, _describe_window(entry)))
    return entry


def verify_checkpoint(checkpoint: JsonObject, keys: Any) -> JsonObject:
    """Checks a checkpoint against the keys document (GET /jobsvc/v1/audit/keys's answer, or its
    data list): its key_id is listed, the listed key is the key of that id, the Ed25519 signature
    over checkpoint_message() verifies with it, and issued_at is in the key's window
    (valid_from <= issued_at < valid_until, no end when valid_until is null). Returns the key's
    entry; raises AuditVerificationError."""
    checkpoint = _object("the checkpoint", checkpoint)
    _text("the checkpoint's project_id", checkpoint.get("project_id"))
    tree_size = _count("the checkpoint's tree_size", checkpoint.get("tree_size"))
    root = _hash("the checkpoint's root_hash", checkpoint.get("root_hash"))
    _instant("the checkpoint's issued_at", checkpoint.get("issued_at"))
    entry = _check_signature("checkpoint", checkpoint, checkpoint_message, "issued_at", "issued", keys)
    if tree_size == 0 and root != EMPTY_ROOT:
        raise _fail("the checkpoint signs an empty tree with the root %s, not the empty tree's %s" % (root.hex(), EMPTY_ROOT.hex()))
    return entry


def _ordered(a: JsonObject, b: JsonObject) -> Tuple[JsonObject, JsonObject]:
    """The two checkpoints, the one issued first first (the smaller tree first at the same time):
    "newer" is the signed time, not the order they were given in, or a log cut back and signed
    again would pass for one that grew."""
    key_a = (_instant("issued_at", a["issued_at"]), a["tree_size"])
    key_b = (_instant("issued_at", b["issued_at"]), b["tree_size"])
    return (a, b) if key_a <= key_b else (b, a)


def verify_checkpoint_consistency(old: JsonObject, new: JsonObject, proof: Optional[JsonObject], keys: Any) -> Tuple[JsonObject, JsonObject]:
    """Checks both checkpoints (verify_checkpoint), that they are of one project, and that the tree
    of the one issued later extends the tree of the one issued first: the same size and root, or
    a consistency proof ({first, second, consistency_path}, GET /jobsvc/v1/audit/proofs/consistency's
    answer) between their sizes. A later tree with fewer leaves is refused whatever the proof.
    Returns (earlier, later); raises AuditVerificationError."""
    verify_checkpoint(old, keys)
    verify_checkpoint(new, keys)
    if old["project_id"] != new["project_id"]:
        raise _fail("the checkpoints are of two projects, %s and %s" % (old["project_id"], new["project_id"]))
    earlier, later = _ordered(old, new)
    if later["tree_size"] < earlier["tree_size"]:
        raise _fail(
            "tree shrank from %d to %d leaves: the newest events were truncated (the checkpoint issued at %s has fewer leaves than the one issued at %s)"
            % (earlier["tree_size"], later["tree_size"], later["issued_at"], earlier["issued_at"])
        )
    if earlier["tree_size"] == 0:
        return earlier, later  # an empty tree is extended by every tree
    path: List[bytes] = []
    if earlier["tree_size"] < later["tree_size"] or proof is not None:
        if proof is None:
            raise _fail("a consistency proof from %d to %d leaves is needed" % (earlier["tree_size"], later["tree_size"]))
        proof = _object("the consistency proof", proof)
        first = _count("the consistency proof's first", proof.get("first"))
        second = _count("the consistency proof's second", proof.get("second"))
        if (first, second) != (earlier["tree_size"], later["tree_size"]):
            raise _fail(
                "the consistency proof is from %d to %d leaves, the checkpoints have %d and %d" % (first, second, earlier["tree_size"], later["tree_size"])
            )
        hashes = proof.get("consistency_path")
        if not isinstance(hashes, list):
            raise _fail("the consistency proof has no consistency_path list")
        path = [_hash("consistency_path[%d]" % i, h) for i, h in enumerate(hashes)]
    verify_consistency(earlier["tree_size"], later["tree_size"], bytes.fromhex(earlier["root_hash"]), bytes.fromhex(later["root_hash"]), path)
    return earlier, later


def _leaf_members(what: str, value: Any) -> JsonObject:
    """The leaf object in value: its seven members, without the cursor, state and leaf_index a feed
    event adds beside them. A member missing, or one no leaf object has, is refused here, so that
    the reason is not a bare root mismatch (docs/audit.md, Attested exports)."""
    value = _object(what, value)
    missing = [name for name in _LEAF_FIELDS if name not in value]
    if missing:
        raise _fail("%s lacks %s: it is not an event of the feed" % (what, ", ".join(missing)))
    foreign = [name for name in value if name not in _LEAF_FIELDS and name not in _FEED_ONLY_FIELDS]
    if foreign:
        raise _fail("%s has %s, which no leaf object has" % (what, ", ".join(foreign)))
    return {name: value[name] for name in _LEAF_FIELDS}


def leaf_object(value: JsonObject) -> Tuple[JsonObject, Optional[int]]:
    """The leaf object of what a user holds of an event, and the leaf_index it names if any: the
    leaf object itself, a feed event (the leaf object with cursor, state and leaf_index, which are
    left out) or a line of an attested audit-log export ({..., "leaf_index", "leaf"}). A leaf with
    a member missing or one no leaf object has is refused."""
    value = _object("the leaf", value)
    if isinstance(value.get("leaf"), Mapping):
        index = value.get("leaf_index")
        return _leaf_members("the line's leaf", value["leaf"]), None if index is None else _count("the line's leaf_index", index)
    index = value.get("leaf_index")
    return _leaf_members("the leaf", value), None if index is None else _count("the event's leaf_index", index)


def verify_leaf_inclusion(leaf: JsonObject, proof: JsonObject, checkpoint: JsonObject, keys: Any) -> int:
    """Checks the checkpoint (verify_checkpoint) and that the leaf (see leaf_object) is at the
    proof's leaf_index in its tree, with the proof ({leaf_index, tree_size, inclusion_path},
    GET /jobsvc/v1/audit/proofs/inclusion's answer) for the checkpoint's tree_size. Returns the
    leaf index; raises AuditVerificationError."""
    verify_checkpoint(checkpoint, keys)
    leaf, named_index = leaf_object(leaf)
    proof = _object("the inclusion proof", proof)
    index = _count("the inclusion proof's leaf_index", proof.get("leaf_index"))
    size = _count("the inclusion proof's tree_size", proof.get("tree_size"))
    if named_index is not None and named_index != index:
        raise _fail("the event is leaf %d, the proof is for leaf %d" % (named_index, index))
    if size != checkpoint["tree_size"]:
        raise _fail("the proof is for a tree of %d leaves, the checkpoint signs one of %d" % (size, checkpoint["tree_size"]))
    if isinstance(leaf.get("project_id"), str) and leaf["project_id"] != checkpoint["project_id"]:
        raise _fail("the event is of project %s, the checkpoint of project %s" % (leaf["project_id"], checkpoint["project_id"]))
    hashes = proof.get("inclusion_path")
    if not isinstance(hashes, list):
        raise _fail("the inclusion proof has no inclusion_path list")
    path = [_hash("inclusion_path[%d]" % i, h) for i, h in enumerate(hashes)]
    verify_inclusion(_leaf_digest("the leaf", leaf), index, size, path, bytes.fromhex(checkpoint["root_hash"]))
    return index


def _leaf_digest(what: str, leaf: JsonObject) -> bytes:
    try:
        return leaf_hash(leaf)
    except (TypeError, ValueError) as error:
        raise _fail("%s has no JCS form: %s" % (what, error)) from None


@dataclass(frozen=True)
class ExportReport:
    """What verify_export established."""

    kind: str
    """"audit_log" or "jobs", as the manifest says."""
    project_id: str
    rows: int
    """Lines before the manifest: as many as its signed lines count says."""
    leaves: int
    """Distinct leaves the rows hold, each proven to be in the checkpoint's tree at its index."""
    unattested_rows: int
    """Rows with no event in the tree (leaf_index and leaf null: a user's account events in the
    audit log): no proof covers what they say; only the manifest's signed lines count tells that
    one was added or taken out."""
    checkpoint: JsonObject
    """The manifest's checkpoint, verified."""
    stored_checkpoint: Optional[JsonObject]
    """The checkpoint kept earlier that the export's tree was shown to be consistent with."""
    signed_at: str
    """When the manifest was signed, as it says."""
    manifest_key: JsonObject
    """The keys document's entry of the key that signed the manifest."""


def _parse_line(number: int, text: str) -> JsonObject:
    def no_repeats(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        found: Dict[str, Any] = {}
        for name, value in pairs:
            if name in found:
                raise _fail("line %d has the field %s twice" % (number, json.dumps(name)))
            found[name] = value
        return found

    def no_constant(name: str) -> Any:
        raise _fail("line %d holds %s, which is not JSON" % (number, name))

    try:
        value = json.loads(text, object_pairs_hook=no_repeats, parse_constant=no_constant)
    except ValueError as error:
        raise _fail("line %d is not JSON: %s" % (number, error)) from None
    return _object("line %d" % number, value)


def _attested(what: str, value: Any) -> Tuple[int, JsonObject]:
    value = _object(what, value)
    index = _count("%s's leaf_index" % what, value.get("leaf_index"))
    return index, _leaf_members("%s's leaf" % what, value.get("leaf"))


def _row_leaves(number: int, row: JsonObject) -> Tuple[str, List[Tuple[int, JsonObject]]]:
    """The form of a row ("jobs" or "audit_log") and the (leaf_index, leaf) pairs it holds."""
    if "attestation" in row:
        attestation = _object("line %d's attestation" % number, row["attestation"])
        created = _attested("line %d's attestation.created" % number, attestation.get("created"))
        latest = _attested("line %d's attestation.latest" % number, attestation.get("latest"))
        # The leaves prove events; these two checks tie them to the row's job.
        if created[1].get("type") != "job_created":
            raise _fail("line %d's attestation.created is a %s event, not the job's job_created" % (number, json.dumps(created[1].get("type"))))
        for name, (_, leaf) in (("created", created), ("latest", latest)):
            if leaf.get("aggregate_id") != row.get("id"):
                raise _fail("line %d's attestation.%s is an event of %s, not of the row's job %s" % (number, name, leaf.get("aggregate_id"), row.get("id")))
        return "jobs", [created, latest]
    if "leaf_index" in row or "leaf" in row:
        if row.get("leaf_index") is None and row.get("leaf") is None:
            return "audit_log", []
        return "audit_log", [_attested("line %d" % number, row)]
    raise _fail("line %d has no leaf_index and leaf (nor attestation): it is not a line of an attested export" % number)


def _lines(source: Union[Iterable[Union[str, bytes]], IO[Any], "os.PathLike[str]", str, bytes]) -> Iterator[Union[str, bytes]]:
    if isinstance(source, os.PathLike):
        with open(source, "rb") as file:
            yield from file
    elif isinstance(source, (str, bytes)):
        yield from source.splitlines()
    else:
        yield from source


def verify_export(
    lines_or_file: Union[Iterable[Union[str, bytes]], IO[Any], "os.PathLike[str]", str, bytes],
    keys: Any,
    stored_checkpoint: Optional[JsonObject] = None,
    consistency_proof: Optional[JsonObject] = None,
) -> ExportReport:
    """Checks an attested NDJSON export (GET .../jobs/export or .../audit-log/export with
    attest=true): a file opened for reading, a path (os.PathLike), an iterable of lines, or the
    whole text as one str or bytes. Every row's leaves (one leaf is the same object wherever it
    appears, and of the manifest's project), the trailing manifest and its signature (by a listed
    key, signed_at in its window), that its leaves are the ones the rows name and its lines count
    the rows, its checkpoint (verify_checkpoint), and that the exported leaves with the manifest's
    multi-leaf proof give the checkpoint's root. The signature over leaves and lines is what shows
    that no row was taken out: the proof alone would pass with a row's leaf moved into it. With
    stored_checkpoint (one kept earlier), also that the export's tree extends it
    (verify_checkpoint_consistency, consistency_proof between the two sizes). Returns an
    ExportReport; raises AuditVerificationError."""
    if consistency_proof is not None and stored_checkpoint is None:
        raise ValueError("a consistency proof needs the stored checkpoint it starts from")
    digests: Dict[int, Tuple[bytes, int]] = {}  # leaf index: (leaf hash, first line naming it)
    projects: Dict[Any, int] = {}  # a leaf's project_id: the first line naming it
    forms: Dict[str, int] = {}  # row form: the first line of that form
    manifest: Optional[JsonObject] = None
    manifest_line = 0
    rows = unattested = 0
    for number, raw in enumerate(_lines(lines_or_file), start=1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise _fail("line %d is not UTF-8" % number) from None
        if not text.strip():
            continue
        row = _parse_line(number, text)
        if manifest is not None:
            raise _fail("line %d comes after the manifest (line %d), which ends an export" % (number, manifest_line))
        if set(row) == {"manifest"}:
            manifest, manifest_line = _object("the manifest", row["manifest"]), number
            continue
        rows += 1
        form, held = _row_leaves(number, row)
        forms.setdefault(form, number)
        unattested += not held
        for index, leaf in held:
            digest = _leaf_digest("line %d's leaf %d" % (number, index), leaf)
            seen = digests.setdefault(index, (digest, number))
            if seen[0] != digest:
                raise _fail("lines %d and %d name leaf %d with different objects" % (seen[1], number, index))
            project = leaf["project_id"]
            projects.setdefault(project if isinstance(project, str) else (json.dumps(project),), number)
    if manifest is None:
        raise _fail("the export has no manifest line at its end: it was cut short, or was not exported with attest=true")
    if manifest.get("version") != 1:
        raise _fail("the manifest's version is %s; this verifier reads version 1" % json.dumps(manifest.get("version")))
    kind = manifest.get("kind")
    if kind not in ("audit_log", "jobs"):
        raise _fail("the manifest's kind is %s, not audit_log or jobs" % json.dumps(kind))
    project_id = _text("the manifest's project_id", manifest.get("project_id"))
    counted = _count("the manifest's lines", manifest.get("lines"))
    key = _check_manifest_signature(manifest, keys)
    for form, number in sorted(forms.items()):
        if form != kind:
            raise _fail("line %d is a row of a %s export, the manifest says %s" % (number, form, kind))
    checkpoint = _object("the manifest's checkpoint", manifest.get("checkpoint"))
    verify_checkpoint(checkpoint, keys)
    if checkpoint["project_id"] != project_id:
        raise _fail("the manifest is of project %s, its checkpoint of project %s" % (project_id, checkpoint["project_id"]))
    for project, number in sorted(projects.items(), key=lambda item: item[1]):
        if project != project_id:
            shown = project if isinstance(project, str) else project[0]
            raise _fail("line %d's leaf is of project %s, the manifest of project %s" % (number, shown, project_id))
    _check_manifest_leaves(manifest.get("leaves"), digests)
    if counted != rows:
        raise _fail("the manifest counts %d lines before it, the export has %d: lines were deleted or added" % (counted, rows))
    proof = _proof_ranges(manifest.get("proof"))
    root = root_from_multi_leaf_proof(checkpoint["tree_size"], {index: digest for index, (digest, _) in digests.items()}, proof)
    if root.hex() != checkpoint["root_hash"]:
        raise _fail(
            "the export's leaves and proof give the root %s, the checkpoint signs %s: a leaf or a proof hash was altered" % (root.hex(), checkpoint["root_hash"])
        )
    if stored_checkpoint is not None:
        verify_checkpoint_consistency(stored_checkpoint, checkpoint, consistency_proof, keys)
    return ExportReport(kind, project_id, rows, len(digests), unattested, checkpoint, stored_checkpoint, manifest["signed_at"], key)


def _check_manifest_signature(manifest: JsonObject, keys: Any) -> JsonObject:
    """The manifest's signature (docs/audit.md, Attested exports), checked as a checkpoint's is,
    signed_at in the key's window. Returns the key's entry."""
    signed_at = manifest.get("signed_at")
    if not isinstance(signed_at, str) or not _UTC_MILLIS.fullmatch(signed_at):
        raise _fail("the manifest's signed_at is not an RFC 3339 UTC time with milliseconds (YYYY-MM-DDTHH:MM:SS.sssZ): %s" % json.dumps(signed_at))

    def message(manifest: JsonObject) -> bytes:
        try:
            return manifest_message(manifest)
        except (TypeError, ValueError) as error:
            raise _fail("the manifest has no JCS form: %s" % error) from None

    return _check_signature("manifest", manifest, message, "signed_at", "signed", keys)


def _check_manifest_leaves(leaves: Any, digests: Mapping[int, Tuple[bytes, int]]) -> None:
    if not isinstance(leaves, list):
        raise _fail("the manifest has no leaves list")
    listed: Set[int] = set()
    previous = -1
    for i, index in enumerate(leaves):
        index = _count("the manifest's leaves[%d]" % i, index)
        if index <= previous:
            raise _fail("the manifest's leaves are not ascending without repeats (%d after %d)" % (index, previous))
        listed.add(index)
        previous = index
    unlisted = sorted(set(digests) - listed)
    if unlisted:
        raise _fail("line %d names leaf %d, which the manifest's leaves do not list" % (digests[unlisted[0]][1], unlisted[0]))
    missing = sorted(listed - set(digests))
    if missing:
        raise _fail("the manifest lists leaf %d, but no line holds it: a line was deleted" % missing[0])


def _proof_ranges(proof: Any) -> List[Tuple[int, int, bytes]]:
    if not isinstance(proof, list):
        raise _fail("the manifest has no proof list")
    ranges: List[Tuple[int, int, bytes]] = []
    for i, item in enumerate(proof):
        item = _object("the manifest's proof[%d]" % i, item)
        start = _count("the manifest's proof[%d].start" % i, item.get("start"))
        end = _count("the manifest's proof[%d].end" % i, item.get("end"))
        ranges.append((start, end, _hash("the manifest's proof[%d].hash" % i, item.get("hash"))))
    return ranges
