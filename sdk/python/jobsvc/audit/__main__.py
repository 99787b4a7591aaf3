"""python -m jobsvc.audit: the audit-log verifier's commands (docs/audit.md, What the verifiers
check). Each ends with one line, "OK: ..." (exit 0) or "FAILED: <reason>" (exit 1); a command
line it cannot run (unknown command, missing argument, unreadable file) exits 2. It makes no
request and needs no credentials: the keys document is a file you saved.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Any, List, Mapping, NoReturn, Optional

from ._merkle import AuditVerificationError
from ._verify import verify_checkpoint, verify_checkpoint_consistency, verify_export, verify_leaf_inclusion


class _UsageError(Exception):
    """A command line that names something this process cannot read: exit 2, like argparse's."""


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as error:
        raise _UsageError("cannot read %s: %s" % (path, error.strerror or error)) from None
    try:
        return json.loads(raw)
    except ValueError as error:
        raise AuditVerificationError("%s is not JSON: %s" % (path, error)) from None


def _window(key: Mapping[str, Any]) -> str:
    until = key.get("valid_until")
    return "valid from %s%s" % (key.get("valid_from"), " until %s" % until if until is not None else ", current")


def _checkpoint(args: argparse.Namespace) -> str:
    checkpoint = _read_json(args.checkpoint)
    key = verify_checkpoint(checkpoint, _read_json(args.keys))
    return "checkpoint of %s at tree_size %d (root %s) issued at %s, signed by key %s (%s)" % (
        checkpoint["project_id"],
        checkpoint["tree_size"],
        checkpoint["root_hash"],
        checkpoint["issued_at"],
        checkpoint["key_id"],
        _window(key),
    )


def _inclusion(args: argparse.Namespace) -> str:
    leaf, proof, checkpoint = _read_json(args.leaf), _read_json(args.proof), _read_json(args.checkpoint)
    index = verify_leaf_inclusion(leaf, proof, checkpoint, _read_json(args.keys))
    return "leaf %d is in the tree of %d leaves of %s signed at %s by key %s" % (
        index,
        checkpoint["tree_size"],
        checkpoint["project_id"],
        checkpoint["issued_at"],
        checkpoint["key_id"],
    )


def _consistency(args: argparse.Namespace) -> str:
    old, new, proof = _read_json(args.old), _read_json(args.new), _read_json(args.proof)
    earlier, later = verify_checkpoint_consistency(old, new, proof, _read_json(args.keys))
    return "the tree of %d leaves signed at %s extends the tree of %d leaves signed at %s (%s)" % (
        later["tree_size"],
        later["issued_at"],
        earlier["tree_size"],
        earlier["issued_at"],
        later["project_id"],
    )


def _export(args: argparse.Namespace) -> str:
    if args.consistency and not args.checkpoint:
        raise _UsageError("--consistency needs --checkpoint: the proof starts from a stored checkpoint")
    keys = _read_json(args.keys)
    stored = _read_json(args.checkpoint) if args.checkpoint else None
    proof = _read_json(args.consistency) if args.consistency else None
    source: IO[bytes]
    try:
        source = sys.stdin.buffer if args.export == "-" else open(args.export, "rb")
    except OSError as error:
        raise _UsageError("cannot read %s: %s" % (args.export, error.strerror or error)) from None
    with source:
        report = verify_export(source, keys, stored, proof)
    checkpoint = report.checkpoint
    text = "%d rows of the %s export of %s: %d leaves, each in the tree of %d leaves signed at %s by key %s; the manifest, signed at %s by key %s, counts these %d rows" % (
        report.rows,
        report.kind,
        report.project_id,
        report.leaves,
        checkpoint["tree_size"],
        checkpoint["issued_at"],
        checkpoint["key_id"],
        report.signed_at,
        report.manifest_key["key_id"],
        report.rows,
    )
    if report.unattested_rows:
        text += "; %d rows have no event in the tree (account events): the proof does not cover them, only the count does" % report.unattested_rows
    if report.stored_checkpoint is not None:
        text += "; the tree is consistent with the stored checkpoint of %d leaves signed at %s" % (
            report.stored_checkpoint["tree_size"],
            report.stored_checkpoint["issued_at"],
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobsvc.audit",
        description="Verify jobsvc's audit log offline: checkpoints, proofs and attested exports (docs/audit.md).",
        epilog="keys.json is GET /jobsvc/v1/audit/keys's answer, saved as it came. Prints OK: ... (exit 0) or FAILED: <reason> (exit 1).",
    )
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)

    def command(name: str, help: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    sub = command("checkpoint", "a checkpoint's signature and its key's window", _checkpoint)
    sub.add_argument("checkpoint", metavar="checkpoint.json")
    sub = command("inclusion", "that a leaf is at its leaf_index in a checkpoint's tree", _inclusion)
    sub.add_argument("leaf", metavar="leaf.json", help="the leaf object, the feed event or an attested audit-log export line")
    sub.add_argument("proof", metavar="proof.json", help="GET /jobsvc/v1/audit/proofs/inclusion's answer")
    sub.add_argument("checkpoint", metavar="checkpoint.json")
    sub = command("consistency", "both checkpoints, and that the later one's tree extends the earlier one's", _consistency)
    sub.add_argument("old", metavar="old.json")
    sub.add_argument("new", metavar="new.json")
    sub.add_argument("proof", metavar="proof.json", help="GET /jobsvc/v1/audit/proofs/consistency's answer")
    sub = command("export", "an attested NDJSON export's manifest signature, leaves, proof and checkpoint", _export)
    sub.add_argument("export", metavar="export.ndjson", help="the export file, or - for standard input")
    sub.add_argument("--checkpoint", metavar="stored.json", help="a checkpoint kept earlier: the export's tree must extend it")
    sub.add_argument("--consistency", metavar="proof.json", help="the consistency proof from the stored checkpoint's size to the export's")
    for name in ("checkpoint", "inclusion", "consistency", "export"):
        commands.choices[name].add_argument("--keys", metavar="keys.json", required=True, help="GET /jobsvc/v1/audit/keys's answer")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Runs one command; returns the exit status (0 verified, 1 refused, 2 unusable command line)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        print("OK: " + args.run(args))
        return 0
    except AuditVerificationError as error:
        print("FAILED: " + error.reason)
        return 1
    except _UsageError as error:
        _usage_exit(parser, str(error))


def _usage_exit(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)  # prints the usage and the message to stderr, exits 2


if __name__ == "__main__":
    sys.exit(main())
