"""jobsvc: a client, a worker and webhook verification, on the standard library alone."""

from ._version import __version__
from .client import Client, CursorExpiredError, EventVerdict, Interrupt, JobsvcError, JsonObject, StaleCommitError
from .webhook import WebhookVerificationError, verify_webhook
from .worker import Handler, JobCancelled, JobContext, JobTimeout, RateLimited, Worker, WorkerStopped

__all__ = [
    "__version__",
    "Client",
    "Interrupt",
    "JsonObject",
    "JobsvcError",
    "CursorExpiredError",
    "StaleCommitError",
    "EventVerdict",
    "Worker",
    "Handler",
    "JobContext",
    "JobTimeout",
    "JobCancelled",
    "RateLimited",
    "WorkerStopped",
    "verify_webhook",
    "WebhookVerificationError",
]
