"""client.audit against the service (docs/audit.md): checkpoints issued and listed, proofs checked
with jobsvc.audit, feed events proven end to end by verify_event and an altered one refused, and an
attested jobs export. In a project of its own (JOBSVC_AUDIT_API_KEY), so that its checkpoints and
its export hold only what this module did."""

import copy
import datetime
import os
import unittest
from unittest import mock

import jobsvc
from jobsvc import audit

from .service import URL, needs_service, wait_for

AUDIT_API_KEY = os.environ.get("JOBSVC_AUDIT_API_KEY")


def flip(hash_hex):
    """The hash with its first bit flipped."""
    raw = bytearray.fromhex(hash_hex)
    raw[0] ^= 1
    return raw.hex()


@needs_service
@unittest.skipUnless(AUDIT_API_KEY, "JOBSVC_AUDIT_API_KEY names a project of the audit tests' own")
class AuditClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = jobsvc.Client(URL, AUDIT_API_KEY)
        cls.created = [cls.client.jobs.create(job_type="py-audit", queue="py-audit", payload={"n": n, "ratio": n / 4}) for n in range(3)]
        cls.first = cls.client.audit.issue_checkpoint()
        cls.client.jobs.create(job_type="py-audit", queue="py-audit", payload={"n": 3})
        cls.second = cls.client.audit.issue_checkpoint()
        cls.keys = cls.client.audit.keys()

    def feed(self):
        """Every event of the project's feed, once each carries its leaf_index."""

        def read():
            events, after = [], None
            while True:
                page = self.client.events_page(after=after, limit=1000)
                events += page["data"]
                if not page["has_more"]:
                    return events if all(e["leaf_index"] is not None for e in events) else None
                after = page["next_cursor"]

        return wait_for(read, what="every feed event to carry its leaf_index")

    def created_event(self, job_id):
        return next(e for e in self.feed() if e["type"] == "job_created" and e["aggregate_id"] == job_id)

    def test_checkpoints_are_signed_and_listed_page_by_page(self):
        self.assertEqual(audit.verify_checkpoint(self.first, self.keys)["key_id"], self.first["key_id"])
        self.assertGreater(self.second["tree_size"], self.first["tree_size"])
        page = self.client.audit.checkpoints(limit=1)
        self.assertEqual(page["data"], [self.first])
        self.assertTrue(page["has_more"])
        self.assertEqual(self.client.audit.checkpoints(after=page["next_cursor"], limit=1)["data"], [self.second])
        self.assertEqual(list(self.client.audit.all_checkpoints(limit=1))[:2], [self.first, self.second])
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=1)
        self.assertEqual(self.client.audit.checkpoints(from_=later)["data"], [])

    def test_proofs_verify_with_jobsvc_audit(self):
        event = self.created_event(self.created[1]["id"])
        proof = self.client.audit.inclusion_proof(event["leaf_index"], self.first["tree_size"])
        self.assertEqual(audit.verify_leaf_inclusion(event, proof, self.first, self.keys), event["leaf_index"])
        consistency = self.client.audit.consistency_proof(self.first["tree_size"], self.second["tree_size"])
        self.assertEqual(audit.verify_checkpoint_consistency(self.first, self.second, consistency, self.keys), (self.first, self.second))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.audit.consistency_proof(0, self.second["tree_size"])
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_request"))

    def test_verify_event_proves_a_feed_event_and_refuses_an_altered_one(self):
        event = self.created_event(self.created[0]["id"])
        verdict = self.client.audit.verify_event(event)
        self.assertTrue(verdict.verified, verdict.reason)
        self.assertEqual((verdict.leaf_index, verdict.checkpoint, verdict.key["key_id"]), (event["leaf_index"], self.first, self.first["key_id"]))

        altered = copy.deepcopy(event)
        altered["data"]["payload"]["n"] = 99
        verdict = self.client.audit.verify_event(altered)
        self.assertFalse(verdict.verified)
        self.assertRegex(verdict.reason, "the leaf is not the one the tree holds there")
        self.assertFalse(self.client.audit.verify_event(dict(event, leaf_index=event["leaf_index"] + 1)).verified)

        self.assertTrue(self.client.audit.verify_event(event, keys=self.keys, checkpoint=self.second).verified, "a checkpoint and keys kept")
        forged = dict(self.second, root_hash=flip(self.second["root_hash"]))
        self.assertRegex(self.client.audit.verify_event(event, keys=self.keys, checkpoint=forged).reason, "signature does not verify")
        self.assertRegex(self.client.audit.verify_event(event, keys={"data": []}).reason, "unknown key")
        with self.assertRaises(ValueError):
            self.client.audit.verify_event(dict(event, leaf_index=None))

    def test_verify_event_trusts_the_service_for_nothing_but_the_keys(self):
        event = self.created_event(self.created[2]["id"])
        real = self.client.audit.inclusion_proof

        def altered_path(leaf_index, tree_size):
            proof = real(leaf_index, tree_size)
            return dict(proof, inclusion_path=[flip(proof["inclusion_path"][0])] + proof["inclusion_path"][1:])

        with mock.patch.object(self.client.audit, "inclusion_proof", altered_path):
            self.assertRegex(self.client.audit.verify_event(event).reason, "inclusion path give the root")
        with mock.patch.object(self.client.audit, "inclusion_proof", lambda i, n: dict(real(i, n), leaf_index=i + 1)):
            self.assertRegex(self.client.audit.verify_event(event).reason, "the proof is for leaf")
        forged = dict(self.first, root_hash=flip(self.first["root_hash"]))
        with mock.patch.object(self.client.audit, "checkpoints", lambda **query: {"data": [forged], "has_more": False, "next_cursor": None}):
            self.assertRegex(self.client.audit.verify_event(event).reason, "signature does not verify")

    def test_verify_event_issues_a_checkpoint_when_none_holds_the_event(self):
        job = self.client.jobs.create(job_type="py-audit", queue="py-audit", payload={"n": 4})
        event = self.created_event(job["id"])
        newest = list(self.client.audit.all_checkpoints())[-1]
        self.assertGreaterEqual(event["leaf_index"], newest["tree_size"], "no checkpoint holds it yet")
        refused = self.client.audit.verify_event(event, checkpoint=newest)
        self.assertRegex(refused.reason, "beyond the checkpoint's tree")
        verdict = self.client.audit.verify_event(event)
        self.assertTrue(verdict.verified, verdict.reason)
        self.assertGreater(verdict.checkpoint["tree_size"], event["leaf_index"])
        self.assertEqual(list(self.client.audit.all_checkpoints())[-1], verdict.checkpoint)

    def test_an_attested_jobs_export_verifies(self):
        now = datetime.datetime.now(datetime.timezone.utc)
        hour = datetime.timedelta(hours=1)
        lines = list(self.client.jobs.export(from_=now - hour, until=now + hour, attest=True, as_text=True))
        self.assertIn('"manifest"', lines[-1])
        report = audit.verify_export(lines, self.keys)
        self.assertEqual((report.kind, report.rows), ("jobs", len(lines) - 1))
        self.assertGreaterEqual(report.rows, 4)


if __name__ == "__main__":
    unittest.main()
