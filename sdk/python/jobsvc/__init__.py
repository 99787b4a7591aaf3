"""jobsvc: a client, a worker and webhook verification, on the standard library alone."""

from .client import Client, CursorExpiredError, JobsvcError, StaleCommitError
from .webhook import WebhookVerificationError, verify_webhook
from .worker import JobContext, JobTimeout, Worker, WorkerStopped

__all__ = [
    "Client",
    "JobsvcError",
    "CursorExpiredError",
    "StaleCommitError",
    "Worker",
    "JobContext",
    "JobTimeout",
    "WorkerStopped",
    "verify_webhook",
    "WebhookVerificationError",
]
__version__ = "0.1.0"
