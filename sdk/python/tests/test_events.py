import json
import threading
import unittest
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import jobsvc

from .service import client, needs_service


@needs_service
class EventFeedTest(unittest.TestCase):
    def setUp(self):
        self.client = client()
        # The project is shared with the other modules' tests: a job type of its own keeps this feed apart.
        self.job_type = "py-feed-" + uuid.uuid4().hex[:8]

    def create(self):
        return self.client.jobs.create(job_type=self.job_type, payload={})["id"]

    def test_events_follows_the_feed_across_pages_and_past_its_end(self):
        created = [self.create() for _ in range(3)]
        feed = self.client.events(job_type=self.job_type, types=["job_created"], limit=2, wait=5)
        seen = [next(feed) for _ in range(3)]
        # Created while the generator waits in its long poll at the end of the feed.
        later = threading.Timer(0.5, lambda: created.append(self.create()))
        later.start()
        self.addCleanup(later.cancel)
        seen.append(next(feed))
        feed.close()
        later.join()
        self.assertEqual([e["aggregate_id"] for e in seen], created)
        self.assertEqual(len({e["id"] for e in seen}), 4)
        self.assertTrue(all(e["type"] == "job_created" for e in seen))

    def test_events_resumes_after_a_cursor(self):
        first, second = self.create(), self.create()
        feed = self.client.events(job_type=self.job_type, types="job_created")
        one = next(feed)
        feed.close()
        self.assertEqual(one["aggregate_id"], first)
        resumed = self.client.events(after=one["cursor"], job_type=self.job_type, types="job_created")
        self.assertEqual(next(resumed)["aggregate_id"], second)
        resumed.close()

    def test_events_page(self):
        job_id = self.create()
        self.client.jobs.cancel(job_id)
        page = self.client.events_page(job_id=job_id)
        self.assertEqual([e["type"] for e in page["data"]], ["job_created", "job_cancelled"])
        self.assertEqual((page["has_more"], page["data"][0]["aggregate"]), (False, "job"))
        first = self.client.events_page(job_id=job_id, limit=1)
        self.assertEqual((len(first["data"]), first["has_more"]), (1, True))
        rest = self.client.events_page(job_id=job_id, after=first["next_cursor"])
        self.assertEqual([e["type"] for e in rest["data"]], ["job_cancelled"])
        since = datetime.now(timezone.utc) - timedelta(minutes=1)
        cancelled = self.client.events_page(job_type=self.job_type, types=["job_cancelled"], from_time=since)
        self.assertEqual([e["aggregate_id"] for e in cancelled["data"]], [job_id])
        empty = self.client.events_page(job_id=job_id, after=page["next_cursor"], wait=0.2)
        self.assertEqual((empty["data"], empty["has_more"]), ([], False))

    def test_errors(self):
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            next(self.client.events(after="not-a-cursor"))
        self.assertEqual((caught.exception.code, caught.exception.status), ("invalid_cursor", 400))
        with self.assertRaises(ValueError):
            self.client.events_page(types=[])


class _ScriptedFeed(BaseHTTPRequestHandler):
    """Answers GET /jobsvc/v1/events with the server's next scripted (status, body), recording each query."""

    def do_GET(self):
        self.server.queries.append(self.path)
        status, body = self.server.script.pop(0)
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if status in (429, 503):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


class FeedErrorsTest(unittest.TestCase):
    """The follower's retries and the 410 mapping, against a scripted server (no service needed)."""

    def _client(self, script):
        server = HTTPServer(("127.0.0.1", 0), _ScriptedFeed)
        server.script, server.queries = script, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return jobsvc.Client("http://127.0.0.1:%d" % server.server_address[1], "sv_test_sk_scripted", retry_base_seconds=0.01), server

    def test_transient_errors_are_waited_out_and_each_page_resumes_at_next_cursor(self):
        event = {"id": "evt_1", "cursor": "c-1", "type": "job_created"}
        c, server = self._client(
            [
                (503, {"error": {"code": "service_unavailable", "message": "restarting"}}),
                (429, {"error": {"code": "rate_limit_exceeded", "message": "busy"}}),
                (200, {"data": [], "next_cursor": "c-0", "has_more": False}),
                (200, {"data": [event], "next_cursor": "c-9", "has_more": False}),
                (200, {"data": [dict(event, id="evt_2")], "next_cursor": "c-10", "has_more": False}),
            ]
        )
        feed = c.events(types=["job_created", "job_failed"], queue="q", wait=1)
        self.assertEqual([next(feed)["id"], next(feed)["id"]], ["evt_1", "evt_2"])
        feed.close()
        self.assertEqual(len(server.queries), 5)
        self.assertIn("types=job_created%2Cjob_failed", server.queries[0])
        self.assertNotIn("after=", server.queries[2])
        self.assertIn("after=c-0", server.queries[3])
        self.assertIn("after=c-9", server.queries[4], "the page's next_cursor, not the event's cursor")

    def test_cursor_expired_is_raised_with_the_oldest_cursor(self):
        expired = (410, {"error": {"code": "cursor_expired", "message": "expired; resume at c-42", "oldest_cursor": "c-42"}})
        c, server = self._client([expired, expired])
        with self.assertRaises(jobsvc.CursorExpiredError) as caught:
            c.events_page(after="c-1")
        self.assertEqual((caught.exception.code, caught.exception.status, caught.exception.oldest_cursor), ("cursor_expired", 410, "c-42"))
        self.assertIsInstance(caught.exception, jobsvc.JobsvcError)
        with self.assertRaises(jobsvc.CursorExpiredError):
            next(c.events(after="c-1"))
        self.assertEqual(len(server.queries), 2, "the follower raises it at once")
