import threading
import unittest

import jobsvc

from .service import client, job_reaches, needs_service, wait_for
from .test_worker import recording_logger


@needs_service
class HeartbeatTest(unittest.TestCase):
    def test_a_handler_past_a_third_of_its_timeout_is_kept_alive_by_heartbeats(self):
        """The worker's job and a control job claimed just after it by a worker that never
        heartbeats share a 30 s timeout: when the control job is reaped, the worker's job, claimed
        earlier, would have been too without its heartbeats (every 10 s)."""
        c = client()
        control_claimed, started = threading.Event(), threading.Event()
        control = {}

        def is_reaped(job_id):
            return (c.jobs.get(job_id)["error"] or {}).get("type") == "HeartbeatTimeout"

        def long(job, ctx):
            started.set()
            control_claimed.wait(30)
            wait_for(lambda: is_reaped(control["id"]), 45, "the control job to be reaped")

        logger, records = recording_logger("heartbeat")
        worker = jobsvc.Worker(c, queues=["py-beat"], handlers={"long": long}, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        job = c.jobs.create(job_type="long", queue="py-beat", payload={}, timeout_seconds=30)
        self.assertTrue(started.wait(20))
        control.update(c.jobs.create(job_type="long", queue="py-beat-silent", payload={}, timeout_seconds=30))
        claimed = c.workers.poll(worker_id="wrk_py_silent", queues=["py-beat-silent"], wait_seconds=5)
        self.assertEqual(claimed["jobs"][0]["id"], control["id"])
        control_claimed.set()

        done = job_reaches(c, job["id"], "succeeded", 50)
        self.assertTrue(is_reaped(control["id"]))
        self.assertEqual((done["attempt"], done["error"]), (1, None))
        self.assertNotIn("job_attempt_failed", [e["type"] for e in c.jobs.history(job["id"])["data"]])
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [])
