import hashlib
import hmac
import json
import os
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer

import jobsvc

from .service import client, needs_service, wait_for

RECEIVER_PORT = int(os.environ.get("JOBSVC_TEST_RECEIVER_PORT", "0"))


class _Receiver(BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((raw, self.headers["X-Service-Signature"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@needs_service
@unittest.skipUnless(RECEIVER_PORT, "JOBSVC_TEST_RECEIVER_PORT is a port the service may deliver to")
class WebhookTest(unittest.TestCase):
    def test_deliveries_verify_through_a_rotation_and_tampering_is_refused(self):
        server = HTTPServer(("127.0.0.1", RECEIVER_PORT), _Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        c = client()
        sub = c.webhooks.create(url="http://127.0.0.1:%d/hooks" % RECEIVER_PORT, events=["job.created"])

        def delivery_of_new_job():
            job = c.jobs.create(job_type="py-hooked", payload={})
            found = lambda: next((d for d in _Receiver.received if json.loads(d[0])["data"]["job_id"] == job["id"]), None)  # noqa: E731
            return job, wait_for(found, 20, "the delivery")

        job, (raw, header) = delivery_of_new_job()
        event = jobsvc.verify_webhook(raw, header, sub["secret"])
        self.assertEqual((event["event_type"], event["data"]["job_id"]), ("job.created", job["id"]))

        rotated = c.webhooks.rotate_secret(sub["id"])
        _, (raw, header) = delivery_of_new_job()
        self.assertEqual(header.count("v1="), 2)
        jobsvc.verify_webhook(raw, header, rotated["secret"])
        jobsvc.verify_webhook(raw, header, sub["secret"])
        jobsvc.verify_webhook(raw.decode(), header, ["whsec_other", rotated["secret"]])

        def refusal(**changes):
            args = dict(raw_body=raw, signature_header=header, secrets=rotated["secret"])
            args.update(changes)
            try:
                jobsvc.verify_webhook(**args)
            except jobsvc.WebhookVerificationError as err:
                return err.code
            return None

        signed_at = int(header.split("t=")[1].split(",")[0])
        self.assertEqual(refusal(raw_body=raw.replace(b"job.created", b"job.succeeded")), "invalid_signature")
        self.assertEqual(refusal(now=signed_at + 301), "timestamp_out_of_tolerance")
        self.assertIsNone(refusal(now=signed_at + 299))
        self.assertEqual(refusal(secrets=["whsec_wrong"]), "invalid_signature")
        self.assertEqual(refusal(signature_header=None), "missing_signature")


def _signed(body, timestamp, secret):
    digest = hmac.new(secret.encode("utf-8"), timestamp.encode("utf-8") + b"." + body, hashlib.sha256).hexdigest()
    return "t=%s,v1=%s" % (timestamp, digest)


class SignatureHeaderTest(unittest.TestCase):
    """The header's and the secrets' own rules: no service needed."""

    body = b'{"event_id":"evt_1","event_type":"job.created","created_at":"2026-01-01T00:00:00Z","data":{"schema_version":1}}'
    now = 1_767_225_600

    def test_an_empty_secret_is_refused_so_the_empty_key_never_verifies(self):
        forged = _signed(self.body, str(self.now), "")
        for secrets in ("", [""], [], None, ["whsec_real", ""]):
            with self.assertRaises(ValueError, msg=repr(secrets)):
                jobsvc.verify_webhook(self.body, forged, secrets, now=self.now)
        with self.assertRaises(jobsvc.WebhookVerificationError) as refused:
            jobsvc.verify_webhook(self.body, forged, "whsec_real", now=self.now)
        self.assertEqual(refused.exception.code, "invalid_signature")

    def test_the_timestamp_is_ascii_digits_only(self):
        secret = "whsec_real"
        self.assertEqual(jobsvc.verify_webhook(self.body, _signed(self.body, str(self.now), secret), secret, now=self.now)["event_id"], "evt_1")
        arabic_indic = str(self.now).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
        for timestamp in (arabic_indic, "１７６７２２５６００", "²", " %d" % self.now, "+%d" % self.now, "-1", "1_767_225_600"):
            with self.assertRaises(jobsvc.WebhookVerificationError, msg=repr(timestamp)) as refused:
                jobsvc.verify_webhook(self.body, _signed(self.body, timestamp, secret), secret, now=self.now)
            self.assertEqual(refused.exception.code, "malformed_signature", repr(timestamp))
