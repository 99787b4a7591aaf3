import datetime
import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer

import jobsvc

from .service import API_KEY, URL, client, needs_service


@needs_service
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def test_create_takes_the_api_field_names_and_returns_the_body(self):
        job = self.client.jobs.create(job_type="py-email", payload={"to": "a@example.com"}, queue="py-client", max_attempts=5)
        self.assertTrue(job["id"].startswith("job_"))
        self.assertEqual((job["state"], job["queue"], job["max_attempts"]), ("pending", "py-client", 5))
        got = self.client.jobs.get(job["id"])
        self.assertEqual(got["payload"], {"to": "a@example.com"})

    def test_one_idempotency_key_makes_one_job(self):
        first = self.client.jobs.create(job_type="py-once", payload={"n": 1}, idempotency_key="py-once-key")
        again = self.client.jobs.create(job_type="py-once", payload={"n": 1}, idempotency_key="py-once-key")
        self.assertEqual(first["id"], again["id"])

    def test_retry_policy_for_the_project_and_a_queue(self):
        policy = {"base_delay_seconds": 4, "factor": 3, "max_delay_seconds": 30, "jitter_seconds": 2, "max_attempts": 5}
        self.client.retry_policy.set(queue="py-retry", **policy)
        self.addCleanup(self.client.retry_policy.remove, queue="py-retry")
        got = self.client.retry_policy.get(queue="py-retry")
        self.assertEqual((got["source"], got["base_delay_seconds"], got["max_attempts"]), ("queue", 4, 5))
        self.assertIn("py-retry", [q["queue"] for q in self.client.retry_policy.get()["queues"]])
        self.client.retry_policy.remove(queue="py-retry")
        self.assertNotEqual(self.client.retry_policy.get(queue="py-retry")["source"], "queue")

    def test_pause_and_resume_a_queue(self):
        until = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        paused = self.client.queues.pause("py-held", reason="deploy", until=until)
        self.addCleanup(self.client.queues.resume, "py-held")
        self.assertEqual((paused["queue"], paused["paused"], paused["reason"]), ("py-held", True, "deploy"))
        listed = {q["queue"]: q for q in self.client.queues.list()["data"]}
        self.assertTrue(listed["py-held"]["paused"])
        resumed = self.client.queues.resume("py-held")
        self.assertEqual((resumed["paused"], resumed["reason"]), (False, None))

    def test_ttl_and_a_queue_default(self):
        own = self.client.jobs.create(job_type="py-ttl", payload={}, queue="py-ttl", ttl_seconds=600)
        self.assertEqual(self.client.jobs.get(own["id"])["ttl_seconds"], 600)
        self.assertEqual(self.client.queues.set_settings("py-ttl", 90), {"queue": "py-ttl", "default_ttl_seconds": 90})
        self.addCleanup(self.client.queues.set_settings, "py-ttl", None)
        item = self.client.jobs.create_batch([{"job_type": "py-ttl", "payload": {}, "queue": "py-ttl"}])["results"][0]
        self.assertEqual(self.client.jobs.get(item["body"]["id"])["ttl_seconds"], 90)
        schedule = self.client.recurring.upsert("rjob_py-ttl-tick", job_type="py-ttl-tick", cron_expression="0 * * * *", ttl_seconds=30)
        self.addCleanup(self.client.recurring.delete, "rjob_py-ttl-tick")
        self.assertEqual(schedule["ttl_seconds"], 30)

    def test_dedup_answers_the_existing_job(self):
        dedup = {"key": "py-dedup-1", "while": "active"}
        first = self.client.jobs.create(job_type="py-dedup", payload={"n": 1}, queue="py-dedup", dedup=dedup)
        self.assertNotIn("deduplicated", first)
        again = self.client.jobs.create(job_type="py-dedup", payload={"n": 2}, queue="py-dedup", dedup=dedup)
        self.assertEqual((again["id"], again["deduplicated"], again["payload"]), (first["id"], True, {"n": 1}))
        batch = self.client.jobs.create_batch([{"job_type": "py-dedup", "payload": {}, "queue": "py-dedup", "dedup": dedup}])
        self.assertEqual((batch["created"], batch["failed"]), (0, 0))
        self.assertEqual(batch["results"][0]["status"], 200)
        self.assertEqual(batch["results"][0]["body"]["id"], first["id"])
        replaced = self.client.jobs.create(
            job_type="py-dedup", payload={"n": 3}, queue="py-dedup", dedup=dict(dedup, on_duplicate="replace_payload")
        )
        self.assertEqual((replaced["id"], replaced["payload"]), (first["id"], {"n": 3}))
        debounce = {"key": "py-debounce-1", "seconds": 600, "max_wait_seconds": 3600}
        quiet = self.client.jobs.create(job_type="py-dedup", payload={"n": 1}, queue="py-dedup", debounce=debounce)
        self.assertEqual(quiet["state"], "scheduled")
        again = self.client.jobs.create(job_type="py-dedup", payload={"n": 2}, queue="py-dedup", debounce=debounce)
        self.assertEqual((again["id"], again["payload"], again["deduplicated"]), (quiet["id"], {"n": 2}, True))

    def test_list_all_follows_the_cursor(self):
        made = {self.client.jobs.create(job_type="py-page", payload={}, queue="py-page")["id"] for _ in range(5)}
        self.assertEqual({j["id"] for j in self.client.jobs.list_all(queue="py-page", limit=2)}, made)

    def test_errors_carry_code_status_and_request_id(self):
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.get("job_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        self.assertEqual((caught.exception.code, caught.exception.status), ("job_not_found", 404))
        self.assertRegex(caught.exception.request_id, r"^[0-9A-Z]{26}$")
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            jobsvc.Client(URL, "sv_test_sk_" + "0" * 32).jobs.list()
        self.assertEqual(caught.exception.code, "unauthorized")
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            jobsvc.Client("http://127.0.0.1:9", API_KEY, max_retries=1, retry_base_seconds=0.01).jobs.list()
        self.assertEqual((caught.exception.code, caught.exception.status), ("network_error", 0))

    def test_a_job_as_of_each_event_and_the_history_filtered(self):
        job = self.client.jobs.create(job_type="py-as-of", payload={"n": 7}, queue="py-as-of", max_attempts=1)
        polled = self.client.workers.poll(worker_id="py-asof", queues=["py-as-of"], wait_seconds=5)["jobs"]
        self.assertEqual([j["id"] for j in polled], [job["id"]])
        self.client.workers.heartbeat(job_id=job["id"], worker_id="py-asof", progress=0.5)
        error = {"type": "Nope", "message": "no", "stack_trace": ""}
        self.client.workers.ack(job_id=job["id"], worker_id="py-asof", status="failed", error=error)
        events = self.client.jobs.history(job["id"])["data"]
        self.assertEqual([e["type"] for e in events], ["job_created", "job_claimed", "job_progressed", "job_dead_lettered"])

        states = []
        for event in events:
            then = self.client.jobs.get(job["id"], as_of=event["cursor"])
            self.assertEqual(then["as_of"]["sequence"], event["sequence"])
            states.append((then["state"], then["progress"], (then["error"] or {}).get("type")))
        self.assertEqual(
            states,
            [("pending", None, None), ("processing", None, None), ("processing", 0.5, None), ("dead_letter", 0.5, "Nope")],
        )
        created_at = datetime.datetime.fromisoformat(events[0]["time"].replace("Z", "+00:00"))
        first = self.client.jobs.get(job["id"], as_of=created_at)
        self.assertEqual((first["state"], first["payload"], first["as_of"]["time"]), ("pending", {"n": 7}, events[0]["time"]))
        self.assertNotIn("as_of", self.client.jobs.get(job["id"]))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.get(job["id"], as_of=created_at - datetime.timedelta(milliseconds=1))
        self.assertEqual((caught.exception.code, caught.exception.status), ("job_not_found", 404))
        with self.assertRaises(ValueError):
            self.client.jobs.get(job["id"], as_of=datetime.datetime(2026, 1, 1))

        claims = self.client.jobs.history(job["id"], types=["job_claimed", "job_dead_lettered"])["data"]
        self.assertEqual(claims, [events[1], events[3]])
        self.assertEqual(self.client.jobs.history(job["id"], types="job_progressed")["data"], [events[2]])
        window = self.client.jobs.history(job["id"], since=events[1]["time"], until=events[2]["time"], limit=5)["data"]
        self.assertEqual(window, [e for e in events if events[1]["time"] <= e["time"] <= events[2]["time"]])
        with self.assertRaises(ValueError):
            self.client.jobs.history(job["id"], types=[])
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.history(job["id"], types=["job_exploded"])
        self.assertEqual((caught.exception.code, caught.exception.status), ("invalid_request", 400))

    def test_cancel_and_history(self):
        job = self.client.jobs.create(job_type="py-cancel", payload={}, run_at="2999-01-01T00:00:00Z")
        self.assertEqual(self.client.jobs.cancel(job["id"])["state"], "cancelled")
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.cancel(job["id"])
        self.assertEqual(caught.exception.code, "invalid_state")
        self.assertEqual([e["type"] for e in self.client.jobs.history(job["id"])["data"]], ["job_created", "job_cancelled"])

    def test_priority(self):
        job = self.client.jobs.create(job_type="py-prio", payload={}, queue="py-prio", priority=45)
        self.assertEqual(self.client.jobs.get(job["id"])["priority"], 45)
        changed = self.client.jobs.set_priority(job["id"], -600)
        self.assertEqual((changed["state"], changed["priority"]), ("pending", -600))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.set_priority(job["id"], 601)
        self.assertEqual((caught.exception.code, caught.exception.status), ("invalid_request", 400))
        plain = self.client.jobs.create(job_type="py-prio", payload={}, queue="py-prio-plain")
        self.assertNotIn("priority", self.client.jobs.get(plain["id"]))


class _Recorder(BaseHTTPRequestHandler):
    """Answers /to/<url> with a redirect to <url>, anything else with the Authorization it got."""

    def do_GET(self):
        if self.path.startswith("/jobsvc/v1/to/"):
            self.send_response(302)
            self.send_header("Location", self.path[len("/jobsvc/v1/to/") :].replace("%3A", ":").replace("%2F", "/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"authorization": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class RedirectTest(unittest.TestCase):
    """The API key follows a redirect only to the same origin (no service needed)."""

    def _server(self):
        server = HTTPServer(("127.0.0.1", 0), _Recorder)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return server.server_address[1]

    def test_authorization_is_dropped_when_a_redirect_leaves_the_origin(self):
        home, elsewhere = self._server(), self._server()
        c = jobsvc.Client("http://127.0.0.1:%d" % home, "sv_test_sk_redirected")

        def authorization_after_redirect_to(url):
            return c.request("GET", "/jobsvc/v1/to/" + jobsvc.client._quote(url))["authorization"]

        self.assertEqual(authorization_after_redirect_to("http://127.0.0.1:%d/same" % home), "Bearer sv_test_sk_redirected", "same origin")
        self.assertIsNone(authorization_after_redirect_to("http://127.0.0.1:%d/other-port" % elsewhere), "another port")
        self.assertIsNone(authorization_after_redirect_to("http://localhost:%d/other-host" % home), "another host name")
