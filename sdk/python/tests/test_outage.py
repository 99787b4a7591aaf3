import http.client
import json
import threading
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jobsvc

from .service import API_KEY, URL, client, job_reaches, needs_service, wait_for

# What the service answers while it stops (docs/api-notes.md, "Poll"): 503 in the envelope with Retry-After.
_STOPPING_BODY = json.dumps({"error": {"code": "service_unavailable", "message": "the service is stopping", "request_id": "req_proxy"}}).encode()


class StoppingProxy:
    """Forwards to the real service, except while `stopping` is set: then every request gets the
    503 a stopping service gives. Counts the 503s by path so the test can see who met them."""

    def __init__(self, target):
        self.target = urllib.parse.urlsplit(target)
        self.stopping = threading.Event()
        self.refused = {}
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.stopping.is_set():
                    with proxy.lock:
                        path = self.path.split("?")[0]
                        proxy.refused[path] = proxy.refused.get(path, 0) + 1
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", str(len(_STOPPING_BODY)))
                    self.end_headers()
                    self.wfile.write(_STOPPING_BODY)
                    return
                upstream = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def refused_on(self, suffix):
        with self.lock:
            return sum(n for path, n in self.refused.items() if path.endswith(suffix))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@needs_service
class OutageTest(unittest.TestCase):
    def test_a_503_while_the_service_stops_is_retried_and_nothing_is_lost(self):
        proxy = StoppingProxy(URL)
        self.addCleanup(proxy.close)
        direct = client()
        release = threading.Event()
        started = threading.Event()

        def hold(job, ctx):
            started.set()
            release.wait(30)
            return {"held": True}

        worker = jobsvc.Worker(jobsvc.Client(proxy.url, API_KEY), queues=["py-outage"], handlers={"hold": hold}, concurrency=2, poll_wait_seconds=1)
        worker.start()
        self.addCleanup(worker.stop)
        first = direct.jobs.create(job_type="hold", queue="py-outage", payload={"n": 1})
        self.assertTrue(started.wait(30), "the worker claimed the job")

        # Cleanups run last-in first-out: the service is back before the worker is stopped.
        self.addCleanup(proxy.stopping.clear)
        proxy.stopping.set()
        release.set()
        wait_for(lambda: proxy.refused_on("/workers/ack/batch") + proxy.refused_on("/workers/ack") > 0, 30, "the ack to meet a 503")
        wait_for(lambda: proxy.refused_on("/workers/poll") > 0, 30, "a poll to meet a 503")
        self.assertEqual(direct.jobs.get(first["id"])["state"], "processing", "the refused ack left the attempt open")
        proxy.stopping.clear()

        done = job_reaches(direct, first["id"], "succeeded")
        self.assertEqual(done["attempt"], 1, "the retried ack settled the first attempt")
        second = direct.jobs.create(job_type="hold", queue="py-outage", payload={"n": 2})
        self.assertEqual(job_reaches(direct, second["id"], "succeeded")["attempt"], 1, "the worker polls again after the outage")


if __name__ == "__main__":
    unittest.main()
