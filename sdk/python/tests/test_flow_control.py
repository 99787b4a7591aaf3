"""Flow control (issue 29) through the Python SDK: concurrency_key on creates, a queue's limits, and a
handler's RateLimited acked rate_limited, which puts the job back without spending its attempt.
test/sdk/flow-control.test.ts starts the service and runs this module."""

import datetime
import threading
import time
import unittest

import jobsvc

from .service import client, job_reaches, needs_service, wait_for
from .test_worker import recording_logger


def instant_ms(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


@needs_service
class FlowControlTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def test_concurrency_key_round_trips_on_a_create_and_a_batch_item(self):
        keyed = self.client.jobs.create(job_type="py-flow-key", queue="py-flow-key", payload={}, concurrency_key="cust-1")
        self.assertEqual(self.client.jobs.get(keyed["id"])["concurrency_key"], "cust-1")
        batch = self.client.jobs.create_batch(
            [
                {"job_type": "py-flow-key", "queue": "py-flow-key", "payload": {}, "concurrency_key": "cust-2"},
                {"job_type": "py-flow-key", "queue": "py-flow-key", "payload": {}},
            ]
        )
        with_key, without = (r["body"] for r in batch["results"])
        self.assertEqual(self.client.jobs.get(with_key["id"])["concurrency_key"], "cust-2")
        self.assertIsNone(self.client.jobs.get(without["id"]).get("concurrency_key"))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.create(job_type="py-flow-key", queue="py-flow-key", payload={}, concurrency_key="k" * 501)
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_request"))

    def test_limits_set_get_state_and_delete(self):
        queue = "py-flow-limits"
        limits = self.client.queues.set_limits(
            queue,
            concurrency={"limit": 5, "per_key": {"limit": 1, "by": "concurrency_key"}},
            rate={"limit": 100, "period_seconds": 60},
        )
        self.assertEqual(limits["concurrency"], {"limit": 5, "per_key": {"limit": 1, "by": "concurrency_key"}, "strategy": "queue"})
        self.assertEqual(limits["rate"], {"limit": 100, "period_seconds": 60, "burst": 100, "by": None})
        self.assertEqual(self.client.queues.get_limits(queue), limits)
        for key in ("cust-1", "cust-1", "cust-2"):
            self.client.jobs.create(job_type="py-flow-limited", queue=queue, payload={}, concurrency_key=key)
        state = wait_for(lambda: (lambda s: s if s["waiting"] == 3 else None)(self.client.queues.get_limits_state(queue)), 15, "three jobs waiting")
        self.assertEqual((state["queue"], state["limits"], state["running"], state["held_until"]), (queue, limits, 0, None))
        self.assertEqual([(k["key"], k["waiting"]) for k in state["keys"]], [("cust-1", 2), ("cust-2", 1)])
        self.assertIsNone(self.client.queues.delete_limits(queue))
        self.assertEqual(self.client.queues.get_limits(queue), {"queue": queue, "concurrency": None, "rate": None, "updated_at": None})
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.queues.set_limits(queue)
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_request"))

    def test_a_handler_raising_rate_limited_runs_again_later_as_the_same_attempt(self):
        runs, lock = [], threading.Lock()

        def call_api(job, ctx):
            with lock:
                runs.append((job["attempt"], time.time() * 1000))
                if len(runs) == 1:
                    raise jobsvc.RateLimited(1500)
            return {"called": True}

        logger, records = recording_logger("rate-limited")
        worker = jobsvc.Worker(self.client, queues=["py-flow-rl"], handlers={"call-api": call_api}, logger=logger)
        acks = []
        ack_batch = self.client.workers.ack_batch

        def seen_acks(batch):
            batch = list(batch)
            acks.extend(batch)
            return ack_batch(batch)

        self.client.workers.ack_batch = seen_acks
        worker.start()
        self.addCleanup(worker.stop)
        # One attempt only: were the rate-limited one spent, there would be none left to run again.
        job = self.client.jobs.create(job_type="call-api", queue="py-flow-rl", payload={}, max_attempts=1)

        def put_back():
            j = self.client.jobs.get(job["id"])
            return (j, time.time() * 1000) if j["state"] == "pending" and len(runs) == 1 else None

        waiting, read_at = wait_for(put_back, 15, "the job to be put back")
        self.assertEqual((waiting["attempt"], waiting["error"]), (0, None), "the attempt was not spent")
        due = instant_ms(waiting["run_at"])
        self.assertTrue(runs[0][1] + 1500 <= due <= read_at + 1500, "due retry_after_ms after the ack")
        self.assertEqual([(a["job_id"], a["status"], a["retry_after_ms"]) for a in acks], [(job["id"], "rate_limited", 1500)])
        done = job_reaches(self.client, job["id"], "succeeded", 20)
        self.assertEqual([attempt for attempt, _ in runs], [1, 1], "the next claim is the same attempt")
        self.assertGreaterEqual(runs[1][1], due, "run again once due")
        self.assertEqual((done["attempt"], done["result"]), (1, {"called": True}))
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [])

    def test_rate_limited_takes_whole_milliseconds_from_1_to_a_day(self):
        self.assertEqual([jobsvc.RateLimited(ms).retry_after_ms for ms in (1500, 0, 2.1, 10 * 86400000)], [1500, 1, 3, 86400000])
        self.assertEqual(str(jobsvc.RateLimited(5)), "rate limited; retry after 5 ms")
        for bad in (float("nan"), -1, "5"):
            with self.assertRaises(ValueError):
                jobsvc.RateLimited(bad)

    def test_the_low_level_ack_takes_rate_limited(self):
        job = self.client.jobs.create(job_type="py-flow-ack", queue="py-flow-ack", payload={})
        polled = self.client.workers.poll(worker_id="py-flow-ack", queues=["py-flow-ack"], capacity=1, wait_seconds=5)
        self.assertEqual([j["id"] for j in polled["jobs"]], [job["id"]])
        answer = self.client.workers.ack(job_id=job["id"], worker_id="py-flow-ack", status="rate_limited", retry_after_ms=60000)
        self.assertEqual(answer["action"], "retry")
        after = self.client.jobs.get(job["id"])
        self.assertEqual((after["state"], after["attempt"]), ("pending", 0))
        self.assertEqual(instant_ms(after["run_at"]), instant_ms(answer["retry_at"]))


if __name__ == "__main__":
    unittest.main()
