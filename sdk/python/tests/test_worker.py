import json
import logging
import threading
import time
import unittest
import urllib.request

import jobsvc

from .service import API_KEY, URL, RecordingHandler, client, job_reaches, needs_service, wait_for


def recording_logger(name):
    logger = logging.getLogger("jobsvc.test." + name)
    logger.propagate = False
    logger.handlers[:] = []
    handler = RecordingHandler()
    logger.addHandler(handler)
    return logger, handler


class PaymentDeclined(Exception):
    pass


@needs_service
class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def test_many_jobs_with_concurrency_each_run_once_and_succeed(self):
        runs, lock = {}, threading.Lock()
        at_once = {"now": 0, "most": 0}

        def square(job, ctx):
            with lock:
                runs[job["id"]] = runs.get(job["id"], 0) + 1
                at_once["now"] += 1
                at_once["most"] = max(at_once["most"], at_once["now"])
            threading.Event().wait(0.01)
            with lock:
                at_once["now"] -= 1
            return job["payload"]["n"] ** 2

        logger, records = recording_logger("many")
        worker = jobsvc.Worker(self.client, queues=["py-bulk"], handlers={"square": square}, concurrency=10, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        created = self.client.jobs.create_batch([{"job_type": "square", "queue": "py-bulk", "payload": {"n": n}} for n in range(200)])
        ids = [r["body"]["id"] for r in created["results"]]
        wait_for(lambda: self.client.metrics.summary(queue="py-bulk")["counts"]["succeeded"] == 200, 60, "200 jobs to succeed")
        worker.stop()
        jobs = list(self.client.jobs.list_all(queue="py-bulk", limit=100))
        self.assertEqual(len(jobs), 200)
        self.assertTrue(all(j["state"] == "succeeded" and j["attempt"] == 1 for j in jobs))
        self.assertTrue(all(j["result"] == j["payload"]["n"] ** 2 for j in jobs), "each handler's return value is its job's result")
        self.assertEqual(sorted(runs), sorted(ids))
        self.assertTrue(all(n == 1 for n in runs.values()), "no job ran twice")
        self.assertTrue(1 < at_once["most"] <= 10, "handlers overlapped within the concurrency")
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [])

    def test_a_result_the_service_refuses_still_acks_the_job_succeeded(self):
        logger, records = recording_logger("big-result")
        worker = jobsvc.Worker(self.client, queues=["py-big"], handlers={"big": lambda job, ctx: {"blob": "x" * 70000}}, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        job = self.client.jobs.create(job_type="big", queue="py-big", payload={})
        wait_for(lambda: self.client.jobs.get(job["id"])["state"] == "succeeded", 30, "the job to succeed")
        self.assertIsNone(self.client.jobs.get(job["id"])["result"])
        self.assertTrue(any("refused" in m for m in records.messages("ERROR")), "the dropped result is logged")

    def test_a_throwing_handler_is_retried_then_dead_lettered(self):
        attempts = []

        def charge(job, ctx):
            attempts.append(job["attempt"])
            raise PaymentDeclined("card declined on attempt %d" % job["attempt"])

        logger, _ = recording_logger("flaky")
        worker = jobsvc.Worker(self.client, queues=["py-flaky"], handlers={"charge": charge}, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        job = self.client.jobs.create(job_type="charge", queue="py-flaky", payload={}, max_attempts=2)
        dead = job_reaches(self.client, job["id"], "dead_letter", 40)
        self.assertEqual(attempts, [1, 2])
        self.assertEqual(dead["error"]["type"], "PaymentDeclined")
        self.assertEqual(dead["error"]["message"], "card declined on attempt 2")
        self.assertIn("test_worker.py", dead["error"]["stack_trace"])
        types = [e["type"] for e in self.client.jobs.history(job["id"])["data"]]
        self.assertEqual(types, ["job_created", "job_claimed", "job_attempt_failed", "job_claimed", "job_dead_lettered"])

    def test_the_handler_gets_the_trace_context_the_job_was_created_with(self):
        traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        # The client sends no traceparent of its own: a producer's tracing library would add it.
        request = urllib.request.Request(
            URL.rstrip("/") + "/jobsvc/v1/jobs",
            data=json.dumps({"job_type": "traced", "queue": "py-trace", "payload": {}}).encode(),
            method="POST",
            headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json", "traceparent": traceparent},
        )
        with urllib.request.urlopen(request) as res:
            job = json.load(res)
        untraced = self.client.jobs.create(job_type="traced", queue="py-trace", payload={})
        seen = {}

        def traced(job, ctx):
            seen[job["id"]] = ctx.traceparent

        worker = jobsvc.Worker(self.client, queues=["py-trace"], handlers={"traced": traced}, logger=recording_logger("trace")[0])
        worker.start()
        self.addCleanup(worker.stop)
        wait_for(lambda: len(seen) == 2, 20, "both jobs to run")
        self.assertEqual(seen, {job["id"]: traceparent, untraced["id"]: None})

    def test_progress_is_reported(self):
        release = threading.Event()

        def report(job, ctx):
            ctx.progress(0.25)
            release.wait(20)

        worker = jobsvc.Worker(self.client, queues=["py-progress"], handlers={"report": report}, logger=recording_logger("progress")[0])
        worker.start()
        self.addCleanup(worker.stop)
        job = self.client.jobs.create(job_type="report", queue="py-progress", payload={})
        seen = []
        for snapshot in self.client.jobs.events(job["id"]):
            seen.append(snapshot)
            if snapshot["progress"] == 0.25:
                release.set()
        self.assertEqual(seen[-1]["state"], "succeeded")
        self.assertTrue(any(s["state"] == "processing" and s["progress"] == 0.25 for s in seen))

    def test_polls_wait_30_seconds_and_stop_cuts_the_poll_in_flight_short(self):
        polling, sent = threading.Event(), []
        poll = self.client.workers.poll

        def seen_poll(**fields):
            sent.append(fields["wait_seconds"])
            polling.set()
            return poll(**fields)

        self.client.workers.poll = seen_poll
        logger, records = recording_logger("cut-short")
        worker = jobsvc.Worker(self.client, queues=["py-idle"], handlers={"never": lambda job, ctx: None}, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)
        self.assertTrue(polling.wait(20))
        started = time.monotonic()
        worker.stop()
        self.assertLess(time.monotonic() - started, 5, "stop() did not wait out the 30 s poll")
        self.assertEqual(sent, [30])
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [], "a poll stop() cut short is no failure")

    def test_stop_drains_running_handlers_and_hands_the_rest_back_after_the_grace(self):
        release, started = threading.Event(), threading.Semaphore(0)

        def slow(job, ctx):
            started.release()
            release.wait(20)

        def stubborn(job, ctx):
            started.release()
            ctx.cancelled.wait(20)
            stubborn.reason = ctx.cancel_reason

        worker = jobsvc.Worker(self.client, queues=["py-drain"], handlers={"slow": slow}, concurrency=2, logger=recording_logger("drain")[0])
        worker.start()
        jobs = [self.client.jobs.create(job_type="slow", queue="py-drain", payload={}) for _ in range(2)]
        for _ in jobs:
            self.assertTrue(started.acquire(timeout=20))
        stopping = threading.Thread(target=worker.stop)
        stopping.start()
        later = self.client.jobs.create(job_type="slow", queue="py-drain", payload={})
        self.assertEqual(worker.active, 2, "the handlers still run during stop()")
        release.set()
        stopping.join()
        for job in jobs:
            self.assertEqual(self.client.jobs.get(job["id"])["state"], "succeeded")
        self.assertEqual(self.client.jobs.get(later["id"])["state"], "pending")

        grace = jobsvc.Worker(self.client, queues=["py-grace"], handlers={"stubborn": stubborn}, shutdown_grace_seconds=0.3, logger=recording_logger("grace")[0])
        grace.start()
        job = self.client.jobs.create(job_type="stubborn", queue="py-grace", payload={}, max_attempts=2)
        self.assertTrue(started.acquire(timeout=20))
        grace.stop()
        self.assertIsInstance(stubborn.reason, jobsvc.WorkerStopped)
        after = self.client.jobs.get(job["id"])
        # Handed back (issue 28): pending again, the attempt not spent.
        self.assertEqual((after["state"], after["attempt"], after["error"]), ("pending", 0, None))
