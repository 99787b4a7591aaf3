import threading
import time
import unittest
import uuid

import jobsvc

from .service import client, needs_service, wait_for
from .test_worker import recording_logger


@needs_service
class EventConsumerTest(unittest.TestCase):
    def setUp(self):
        self.client = client()
        # The project is shared with the other modules' tests: a job type and names of its own keep these apart.
        self.suffix = uuid.uuid4().hex[:8]
        self.job_type = "py-cons-" + self.suffix

    def consumer(self, name, **fields):
        name = "%s-%s" % (name, self.suffix)
        created = self.client.event_consumers.create(name, types=["job_created"], job_type=self.job_type, **fields)
        self.addCleanup(self._delete, name)
        return name, created

    def _delete(self, name):
        try:
            self.client.event_consumers.delete(name)
        except jobsvc.JobsvcError as err:
            if err.code != "event_consumer_not_found":
                raise

    def create_jobs(self, n):
        return [self.client.jobs.create(job_type=self.job_type, payload={"i": i})["id"] for i in range(n)]

    def start(self, name, handler, **options):
        """run() in a thread; the returned function stops it and re-raises what ended it."""
        stop, ended = threading.Event(), []

        def target():
            try:
                self.client.event_consumers.run(name, handler, wait=1, stop=stop, **options)
            except BaseException as err:
                ended.append(err)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()

        def halt():
            stop.set()
            thread.join(10)
            self.assertFalse(thread.is_alive(), "run() returns once stop is set")
            if ended:
                raise ended[0]

        return halt

    def test_calls_and_a_stale_commit(self):
        name, created = self.consumer("calls", ack_wait_seconds=5)
        self.assertEqual((created["ack_wait_seconds"], created["outstanding"], created["job_type"]), (5, 0, self.job_type))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.event_consumers.create(name)
        self.assertEqual((caught.exception.code, caught.exception.status), ("event_consumer_exists", 409))

        jobs = self.create_jobs(2)
        polled = self.client.event_consumers.poll(name, limit=10)
        self.assertEqual([e["aggregate_id"] for e in polled["data"]], jobs)
        self.assertEqual(self.client.event_consumers.get(name)["outstanding"], 1)
        committed = self.client.event_consumers.commit(name, polled["ack_cursor"])
        self.assertEqual((committed["position"], committed["outstanding"]), (polled["ack_cursor"], 0))
        wait_for(lambda: any(c["name"] == name for c in self.client.event_consumers.list()["data"]), 15, "the list to show it")

        later = self.create_jobs(1)
        held = self.client.event_consumers.poll(name, limit=10)
        self.assertEqual([e["aggregate_id"] for e in held["data"]], later)
        self.client.event_consumers.seek(name, after=created["position"])
        with self.assertRaises(jobsvc.StaleCommitError) as stale:
            self.client.event_consumers.commit(name, held["ack_cursor"])
        self.assertIsInstance(stale.exception, jobsvc.JobsvcError)
        self.assertEqual((stale.exception.code, stale.exception.status, stale.exception.ack_cursor), ("invalid_state", 409, held["ack_cursor"]))
        again = self.client.event_consumers.poll(name, limit=10)
        self.assertEqual([e["aggregate_id"] for e in again["data"]], jobs + later, "read again from where the seek put it")
        with self.assertRaises(ValueError):
            self.client.event_consumers.seek(name)

        self.client.event_consumers.delete(name)
        with self.assertRaises(jobsvc.JobsvcError) as gone:
            self.client.event_consumers.get(name)
        self.assertEqual((gone.exception.code, gone.exception.status), ("event_consumer_not_found", 404))

    def test_two_runners_share_a_consumer(self):
        name, _ = self.consumer("shared")
        jobs = self.create_jobs(20)
        handled = {"a": [], "b": []}
        lock, both = threading.Lock(), threading.Event()

        def handler(which):
            def handle(events):
                with lock:
                    first = not handled[which]
                    handled[which].extend(e["aggregate_id"] for e in events)
                    if handled["a"] and handled["b"]:
                        both.set()
                # Each runner's first batch is held until the other has one: both take part.
                if first:
                    both.wait(15)

            return handle

        logger, records = recording_logger("consumers-shared")
        halts = [self.start(name, handler("a"), limit=3, logger=logger), self.start(name, handler("b"), limit=3, logger=logger)]

        def settled():
            c = self.client.event_consumers.get(name)
            return len(handled["a"]) + len(handled["b"]) >= len(jobs) and c["outstanding"] == 0 and c["position"] == c["delivered"]

        wait_for(settled, 30, "both runners to handle and commit every event")
        for halt in halts:
            halt()
        seen = handled["a"] + handled["b"]
        self.assertEqual(sorted(seen), sorted(jobs), "every job_created")
        self.assertEqual(len(set(seen)), len(seen), "none twice")
        self.assertTrue(handled["a"] and handled["b"], "both runners handled events")
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [])

    def test_a_raising_handler_leaves_its_range_to_come_back_after_the_lease(self):
        name, created = self.consumer("raises", ack_wait_seconds=5)
        self.create_jobs(3)
        calls = []

        def handle(events):
            calls.append([e["id"] for e in events])
            if len(calls) == 1:
                raise RuntimeError("downstream refused")

        logger, records = recording_logger("consumers-raises")
        halt = self.start(name, handle, logger=logger)
        self.addCleanup(halt)
        wait_for(lambda: calls, 15, "the first call")
        held = self.client.event_consumers.get(name)
        self.assertEqual((held["position"], held["outstanding"]), (created["position"], 1), "not committed")
        self.assertEqual(len(records.messages("ERROR")), 1)
        self.assertIn("handler failed", records.messages("ERROR")[0])
        self.assertEqual(str(records.records[0].exc_info[1]), "downstream refused", "logged with its traceback")
        started = time.monotonic()
        # The lease is 5 s: the service hands the same range out again once it ends.
        wait_for(lambda: len(calls) == 2, 20, "the range to come back")
        self.assertGreater(time.monotonic() - started, 2.0, "not before the lease ends")
        self.assertEqual(calls[1], calls[0], "the same events, whole")
        done = wait_for(lambda: (lambda c: c if c["outstanding"] == 0 else None)(self.client.event_consumers.get(name)), 15, "the commit")
        self.assertEqual(done["position"], done["delivered"])

    def test_a_stale_commit_is_logged_and_passed_over(self):
        name, created = self.consumer("stale")
        jobs = self.create_jobs(2)
        calls = []

        def handle(events):
            calls.append([e["aggregate_id"] for e in events])
            # Another operator moves the consumer back while this batch is being handled.
            if len(calls) == 1:
                self.client.event_consumers.seek(name, after=created["position"])

        logger, records = recording_logger("consumers-stale")
        halt = self.start(name, handle, logger=logger)
        self.addCleanup(halt)
        wait_for(lambda: len(calls) == 2 and self.client.event_consumers.get(name)["outstanding"] == 0, 15, "the second handling")
        self.assertEqual(calls, [jobs, jobs])
        self.assertEqual(len(records.messages("WARNING")), 1)
        self.assertIn("commit refused as stale", records.messages("WARNING")[0])
