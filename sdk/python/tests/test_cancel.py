"""Issue 28 through the Python SDK: a running job cancelled with include_running reaches its
handler's ctx.cancelled within a second (heartbeats are 10 s apart, so only the worker's signal
poll can bring it) and ends cancelled; a job handed back keeps its attempt."""

import threading
import time
import unittest

import jobsvc

from .service import client, job_reaches, needs_service
from .test_worker import recording_logger


@needs_service
class CancelRunningTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def test_a_cancel_of_a_running_job_sets_ctx_cancelled_within_a_second(self):
        started = threading.Event()
        seen = {}

        def long(job, ctx):
            started.set()
            if ctx.cancelled.wait(20):
                seen["at"] = time.monotonic()
                seen["reason"] = ctx.cancel_reason
                raise ctx.cancel_reason
            return "not cancelled"

        logger, records = recording_logger("cancel")
        worker = jobsvc.Worker(self.client, queues=["py-cancel"], handlers={"long": long}, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        job = self.client.jobs.create(job_type="long", queue="py-cancel", payload={}, max_attempts=3, timeout_seconds=600)
        self.assertTrue(started.wait(20))
        # The worker watches a job for a cancel once it has run a moment.
        time.sleep(0.5)
        asked = time.monotonic()
        answer = self.client.jobs.cancel(job["id"], include_running=True)
        self.assertEqual(answer, {"id": job["id"], "state": "processing", "cancel_requested": True})
        ended = job_reaches(self.client, job["id"], "cancelled", 10)
        self.assertIn("at", seen, "ctx.cancelled was set")
        self.assertLess(seen["at"] - asked, 1.0, "within 1 s of the cancel")
        self.assertIsInstance(seen["reason"], jobsvc.JobCancelled)
        self.assertEqual(ended["attempt"], 1, "not retried")
        self.assertEqual(records.messages("ERROR"), [])

    def test_the_specs_cancel_of_a_running_job_is_still_refused(self):
        started, done = threading.Event(), threading.Event()

        def wait(job, ctx):
            started.set()
            done.wait(20)

        worker = jobsvc.Worker(self.client, queues=["py-spec-cancel"], handlers={"wait": wait}, logger=recording_logger("spec")[0])
        worker.start()
        self.addCleanup(worker.stop)
        job = self.client.jobs.create(job_type="wait", queue="py-spec-cancel", payload={})
        self.assertTrue(started.wait(20))
        with self.assertRaises(jobsvc.JobsvcError) as refused:
            self.client.jobs.cancel(job["id"])
        self.assertEqual((refused.exception.status, refused.exception.code), (409, "invalid_state"))
        done.set()
        job_reaches(self.client, job["id"], "succeeded", 10)

    def test_release_keeps_the_attempt(self):
        job = self.client.jobs.create(job_type="x", queue="py-release", payload={}, max_attempts=1)
        polled = self.client.workers.poll(worker_id="wrk_py_rel", queues=["py-release"], wait_seconds=5)["jobs"]
        self.assertEqual([(j["id"], j["attempt"]) for j in polled], [(job["id"], 1)])
        released = self.client.workers.release(job_id=job["id"], worker_id="wrk_py_rel")
        self.assertEqual(released, {"id": job["id"], "state": "pending", "attempt": 0, "run_at": None})
        with self.assertRaises(jobsvc.JobsvcError) as late:
            self.client.workers.ack(job_id=job["id"], worker_id="wrk_py_rel", status="succeeded")
        self.assertEqual(late.exception.code, "invalid_state")
        again = self.client.workers.poll(worker_id="wrk_py_rel2", queues=["py-release"], wait_seconds=5)["jobs"]
        self.assertEqual([(j["id"], j["attempt"], j["max_attempts"]) for j in again], [(job["id"], 1, 1)])
