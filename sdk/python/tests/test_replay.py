import json
import os
import threading
import unittest
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jobsvc

from .service import URL, needs_service, wait_for

RECEIVER_PORT = int(os.environ.get("JOBSVC_TEST_RECEIVER_PORT", "0"))
# A project of its own: a replay counts every job.created of its time range, the other test process's included.
REPLAY_API_KEY = os.environ.get("JOBSVC_REPLAY_API_KEY")


class _Receiver(BaseHTTPRequestHandler):
    """Answers 204 at once, except on /hold, which answers once the server's release is set."""

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
        if self.path == "/hold":
            self.server.release.wait(30)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@needs_service
@unittest.skipUnless(RECEIVER_PORT and REPLAY_API_KEY, "JOBSVC_TEST_RECEIVER_PORT is a port the service may deliver to, JOBSVC_REPLAY_API_KEY a project's key")
class ReplayTest(unittest.TestCase):
    def setUp(self):
        self.client = jobsvc.Client(URL, REPLAY_API_KEY)
        server = ThreadingHTTPServer(("127.0.0.1", RECEIVER_PORT), _Receiver)
        server.daemon_threads = True
        server.received, server.lock, server.release = [], threading.Lock(), threading.Event()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.addCleanup(server.release.set)
        self.server = server

    def at(self, path):
        with self.server.lock:
            return [(headers, json.loads(raw)) for p, headers, raw in self.server.received if p == path]

    def subscribe(self, path):
        sub = self.client.webhooks.create(url="http://127.0.0.1:%d%s" % (RECEIVER_PORT, path), events=["job.created"])
        self.addCleanup(self.client.webhooks.delete, sub["id"])
        return sub

    def test_replay_operations_and_redelivery(self):
        # A subscription made before the jobs: once it has their job.created, fan-out has passed
        # them, so a subscription made after gets them only by a replay.
        self.subscribe("/canary")
        since = datetime.now(timezone.utc) - timedelta(milliseconds=1)
        jobs = [self.client.jobs.create(job_type="py-replayed", payload={"i": i})["id"] for i in range(3)]
        wait_for(lambda: set(jobs) <= {body["data"]["job_id"] for _, body in self.at("/canary")}, 20, "the canary deliveries")
        until = datetime.now(timezone.utc)
        sub = self.subscribe("/missing")

        self.assertEqual(self.client.webhooks.replay(sub["id"], since, "missing", until=until, dry_run=True), {"matched": 3})
        self.assertEqual(self.client.webhooks.replay(sub["id"], since.isoformat(), "failed", until=until, event_types="job.created", dry_run=True), {"matched": 0})
        self.assertEqual(self.at("/missing"), [], "a dry run sends nothing")
        with self.assertRaises(ValueError):
            self.client.webhooks.replay(sub["id"], datetime.now(), "all")
        with self.assertRaises(jobsvc.JobsvcError) as refused:
            self.client.webhooks.replay(sub["id"], since, "all", event_types=["job.failed"])
        self.assertEqual((refused.exception.code, refused.exception.status), ("invalid_request", 400))

        started = self.client.webhooks.replay(sub["id"], since, "missing", until=until)
        self.assertEqual(started["matched"], 3)
        self.assertTrue(started["operation_id"].startswith("op_"))
        op_id = started["operation_id"]
        done = wait_for(lambda: (lambda op: op if op["status"] == "succeeded" else None)(self.client.operations.get(op_id)), 30, "the replay")
        self.assertEqual((done["kind"], done["matched"], done["processed"], done["succeeded"], done["failed"]), ("webhook_replay", 3, 3, 3, 0))
        self.assertEqual(sorted(body["data"]["job_id"] for _, body in self.at("/missing")), sorted(jobs))
        with self.assertRaises(jobsvc.JobsvcError) as ended:
            self.client.operations.cancel(op_id)
        self.assertEqual((ended.exception.code, ended.exception.status), ("invalid_state", 409))

        delivered = wait_for(lambda: next((d for d in self.client.webhooks.deliveries(sub["id"])["data"] if d["status"] == "delivered"), None), 15, "a delivery")
        again = self.client.webhooks.redeliver(sub["id"], delivered["id"])
        self.assertEqual((again["status"], again["event_id"], again["redelivery_of"]), ("pending", delivered["event_id"], delivered["id"]))
        repeated = wait_for(lambda: [h for h, _ in self.at("/missing") if h.get("x-jobsvc-redelivery") == delivered["id"]], 20, "the redelivery")
        self.assertEqual(repeated[0]["x-service-event-id"], delivered["event_id"])
        with self.assertRaises(jobsvc.JobsvcError) as missing:
            self.client.webhooks.redeliver(sub["id"], "del_" + "0" * 26)
        self.assertEqual((missing.exception.code, missing.exception.status), ("delivery_not_found", 404))

        # Deliveries to /hold stay unanswered, so the replay stays running until it is stopped.
        holding = self.subscribe("/hold")
        running = self.client.webhooks.replay(holding["id"], since, "missing", until=until)
        self.assertEqual(running["matched"], 3)
        stopped = self.client.operations.cancel(running["operation_id"])
        self.assertEqual((stopped["id"], stopped["status"]), (running["operation_id"], "cancelled"))
        self.assertEqual(self.client.operations.cancel(running["operation_id"])["status"], "cancelled", "stopping it again answers it as it is")
        self.server.release.set()

        wait_for(lambda: self.client.operations.list(limit=1)["data"][0]["id"] == running["operation_id"], 15, "the list to show it")
        page = self.client.operations.list(limit=1)
        self.assertTrue(page["has_more"])
        listed = [op["id"] for op in self.client.operations.list_all(limit=1)]
        self.assertEqual([i for i in listed if i in (op_id, running["operation_id"])], [running["operation_id"], op_id], "newest first, across pages")
        with self.assertRaises(jobsvc.JobsvcError) as unknown:
            self.client.operations.get("op_" + "0" * 26)
        self.assertEqual((unknown.exception.code, unknown.exception.status), ("operation_not_found", 404))
