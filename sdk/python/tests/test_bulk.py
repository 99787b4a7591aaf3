"""Issue 28, item 6 through the Python SDK: a bulk retry of dead-lettered jobs by filter, counted
first (dry run), then followed through its operation until it ends."""

import unittest

import jobsvc

from .service import client, job_reaches, needs_service, wait_for


@needs_service
class BulkTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def dead_lettered(self, queue, n):
        created = self.client.jobs.create_batch([{"job_type": "py-bulk", "queue": queue, "payload": {}, "max_attempts": 1} for _ in range(n)])
        ids = [r["body"]["id"] for r in created["results"]]
        acked = 0
        while acked < n:
            polled = self.client.workers.poll(worker_id="py-bulk", queues=[queue], capacity=50, wait_seconds=5)
            for job in polled["jobs"]:
                self.client.workers.ack(job_id=job["id"], worker_id="py-bulk", status="failed", error={"type": "Boom", "message": "on purpose"})
                acked += 1
        for job_id in ids:
            job_reaches(self.client, job_id, "dead_letter")
        return ids

    def test_bulk_retry_counted_then_followed_to_its_end(self):
        ids = self.dead_lettered("py-bulk", 5)
        dry = wait_for(lambda: (lambda d: d if d["matched"] == 5 else None)(self.client.jobs.bulk("retry", {"queues": ["py-bulk"]}, dry_run=True)))
        self.assertEqual(sorted(dry["sample_ids"]), sorted(ids))
        started = self.client.jobs.bulk("retry", {"queues": ["py-bulk"], "states": ["dead_letter"]})
        self.assertEqual(started["matched"], 5)
        seen = []
        op = self.client.operations.wait(started["operation_id"], interval=0.1, timeout=30, on_progress=seen.append)
        self.assertEqual(op["kind"], "job_bulk")
        self.assertEqual((op["status"], op["processed"], op["succeeded"], op["failed"]), ("succeeded", 5, 5, 0))
        self.assertTrue(seen and seen[-1]["status"] == "succeeded")
        for job_id in ids:
            self.assertNotEqual(self.client.jobs.get(job_id)["state"], "dead_letter")

    def test_bulk_refusals_are_jobsvc_errors(self):
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.bulk("retry", {})
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_request"))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.bulk("retry", {"states": ["pending"]})
        self.assertEqual(caught.exception.code, "invalid_request")
