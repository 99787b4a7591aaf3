"""The service under test: test/sdk/python.test.ts starts one and passes its address and a key."""

import logging
import os
import time
import unittest

import jobsvc

URL = os.environ.get("JOBSVC_URL")
API_KEY = os.environ.get("JOBSVC_API_KEY")
needs_service = unittest.skipUnless(URL and API_KEY, "JOBSVC_URL and JOBSVC_API_KEY name the service under test")


def client():
    return jobsvc.Client(URL, API_KEY)


def wait_for(check, timeout=30.0, what="condition"):
    """Polls check() until it returns something truthy (state, not time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def job_reaches(c, job_id, state, timeout=30.0):
    return wait_for(lambda: (lambda j: j if j["state"] == state else None)(c.jobs.get(job_id)), timeout, "%s to be %s" % (job_id, state))


class RecordingHandler(logging.Handler):
    """A logging handler that keeps every record, for assertions."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        # Handler.handle() holds the handler's lock around emit().
        self.records.append(record)

    def messages(self, level):
        with self.lock:
            return [r.getMessage() for r in self.records if r.levelname == level]
