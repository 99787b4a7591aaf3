"""A worker: polls for jobs, runs their handlers on threads, heartbeats and acknowledges them."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import socket
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ._version import __version__
from .client import Client, Interrupt, JobsvcError, JsonObject

SDK_VERSION = "python/" + __version__
"""Sent as sdk_version when a worker registers."""

Handler = Callable[[JsonObject, "JobContext"], object]
"""Runs one job: fn(job, ctx). A return acks it succeeded, with the returned value (as JSON) the
job's ``result`` (None: no result); RateLimited acks it rate_limited (it runs again after
retry_after_ms, its attempt not spent); another exception acks it failed."""
_LOST_ATTEMPT_CODES = {"invalid_state", "worker_mismatch", "job_not_found"}
_MAX_POLL_CAPACITY = 50
_MAX_ACKS_PER_BATCH = 1000
# A job is watched for a cancel (the signal poll) once it has run this long, as in the TypeScript
# worker: shorter jobs cost no request, and a cancel still reaches the handler within a second.
_SIGNAL_WATCH_DELAY = 0.2
_SIGNAL_WAIT_SECONDS = 25
_MAX_SIGNAL_JOBS = 100
# How long acks the service cannot take are sent again before they are left to its reaper.
_ACK_RETRY_SECONDS = 300
# The longest retry_after_ms the service takes: a day.
_MAX_RETRY_AFTER_MS = 86_400_000


class WorkerStopped(Exception):
    """Why ctx.cancelled is set when the handler still runs at the end of stop()'s grace; the job is
    then handed back (POST /workers/release), its attempt not spent."""


class JobCancelled(Exception):
    """Why ctx.cancelled is set when the job was cancelled while it ran (cancel with
    include_running); the attempt is acked failed at once and the job ends cancelled."""


class RateLimited(Exception):
    """What a handler raises when what the job calls is rate limiting it (an HTTP 429, a quota).
    The attempt is acked rate_limited: the service puts the job back, due retry_after_ms from now,
    without spending an attempt, and holds back the job's concurrency key (or, without a per-key
    limit, its queue) until then, so the other jobs of that key wait too instead of failing.
    retry_after_ms is rounded up to whole milliseconds, at least 1 and at most a day."""

    def __init__(self, retry_after_ms: float, message: Optional[str] = None) -> None:
        if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, (int, float)) or not 0 <= retry_after_ms < math.inf:
            raise ValueError("retry_after_ms must be a number of milliseconds, not %r" % (retry_after_ms,))
        self.retry_after_ms = min(_MAX_RETRY_AFTER_MS, max(1, math.ceil(retry_after_ms)))
        super().__init__(message or "rate limited; retry after %d ms" % self.retry_after_ms)


class JobTimeout(Exception):
    """Why ctx.cancelled is set when the job's timeout_seconds pass."""


class JobContext:
    """What a handler gets beside the job. `cancelled` is a threading.Event set when the job's
    timeout passes (JobTimeout), the service stops the attempt (JobCancelled when the job was
    cancelled while it ran, within about a second), or the worker stops and its grace ends
    (WorkerStopped); `cancel_reason` says which. Long handlers should check it. `traceparent` is the W3C trace
    context the job was created with, or None: a handler that traces continues the creator's
    trace from it (with OpenTelemetry, `TraceContextTextMapPropagator().extract({"traceparent":
    ctx.traceparent})`). `parent_results`, for a job created with depends_on (an extension), maps
    each parent that succeeded to its result (None when its handler returned nothing); a parent
    that ended otherwise (on_parent_failure "run") is not in it (Jobs.dependencies says how it
    ended). It is empty for any other job, whose poll answer carries no "parent_results"."""

    def __init__(self, worker: Worker, running: _Running) -> None:
        self.worker_id = worker.worker_id
        self.traceparent = running.job.get("traceparent")
        self.parent_results: Dict[str, Any] = running.job.get("parent_results") or {}
        self.cancelled = running.cancelled
        self._worker = worker
        self._running = running

    @property
    def cancel_reason(self) -> Optional[BaseException]:
        return self._running.cancel_reason

    def progress(self, value: float) -> None:
        """Reports progress (0.0 to 1.0) with a heartbeat now."""
        self._running.progress = value
        self._worker._beat(self._running)


class _Running:
    def __init__(self, job: JsonObject, interval: float) -> None:
        self.job = job
        self.started = time.monotonic()
        self.deadline = self.started + job["timeout_seconds"]
        self.interval = interval
        self.next_beat = self.started + interval
        self.cancelled = threading.Event()
        self.cancel_reason: Optional[BaseException] = None
        self.progress: Optional[float] = None
        self.settled = False
        self.lock = threading.Lock()

    def cancel(self, reason: BaseException) -> None:
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()


def _error_detail(err: Optional[BaseException]) -> Dict[str, str]:
    return {
        "type": type(err).__name__,
        "message": str(err),
        "stack_trace": "".join(traceback.format_exception(type(err), err, err.__traceback__)),
    }


class Worker:
    """`Worker(client, queues=[...], handlers={job_type: fn}, concurrency=N)`; fn(job, ctx) runs
    one job: a return acks it succeeded, an exception failed (its type, message and traceback)."""

    def __init__(
        self,
        client: Client,
        queues: Iterable[str],
        handlers: Mapping[str, Handler],
        concurrency: int = 1,
        job_types: Optional[Iterable[str]] = None,
        worker_id: Optional[str] = None,
        recurring_schedules: Optional[List[JsonObject]] = None,
        shutdown_grace_seconds: float = 30.0,
        poll_wait_seconds: float = 30,
        backoff_base_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        self.client = client
        self.queues = list(queues)
        if not self.queues:
            raise ValueError("queues must name at least one queue")
        self.handlers = dict(handlers)
        self.concurrency = max(1, int(concurrency))
        self.job_types = list(job_types) if job_types is not None else list(self.handlers)
        self.worker_id = worker_id or "wrk_%s_%d_%s" % (socket.gethostname(), os.getpid(), uuid.uuid4().hex[:6])
        self.recurring_schedules = recurring_schedules
        self.shutdown_grace_seconds = shutdown_grace_seconds
        # As long as the service allows (30 s), as the TypeScript worker: stop() cuts the poll short.
        self.poll_wait_seconds = poll_wait_seconds
        self.backoff_base_seconds = backoff_base_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.log = logger or logging.getLogger("jobsvc")
        self._running: Dict[str, _Running] = {}
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        # Set by stop() once no handler runs any more: the heartbeat and ack threads end after it.
        self._drained = threading.Event()
        self._acks: List[JsonObject] = []
        self._acks_cond = threading.Condition()
        self._poll_interrupt = Interrupt()
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="jobsvc-handler")
        # The signal poll in flight (restarted when a job starts or the last one ends), and whether
        # the service has the route (an older one does not: heartbeats still carry "cancel").
        self._signal_interrupt: Optional[Interrupt] = None
        self._has_signals = True
        self._threads: List[threading.Thread] = []

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._running)

    def start(self) -> None:
        """Registers the worker and returns at once; it polls and runs jobs on background threads."""
        self.client.workers.register(
            worker_id=self.worker_id,
            queues=self.queues,
            job_types=self.job_types,
            hostname=socket.gethostname(),
            sdk_version=SDK_VERSION,
            recurring_schedules=self.recurring_schedules,
        )
        for target, name in ((self._poll_loop, "poll"), (self._tick_loop, "heartbeat"), (self._ack_loop, "ack"), (self._signal_loop, "signals")):
            thread = threading.Thread(target=target, name="jobsvc-" + name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.log.info("jobsvc worker %s started on %s", self.worker_id, self.queues)

    def run(self) -> None:
        """Starts the worker and blocks until SIGTERM or SIGINT, then stops it gracefully."""
        received = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: received.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not received.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stop()

    def stop(self) -> None:
        """Stops polling, lets running handlers finish for up to shutdown_grace_seconds, then sets
        their ctx.cancelled (WorkerStopped) and hands their jobs back (POST /workers/release:
        pending again, the attempt not spent; acked failed where the service cannot take them
        back); returns once acks and releases are sent."""
        if self._stopping.is_set():
            self._stopped.wait()
            return
        self._stopping.set()
        # A poll cut short in the moment between the service's claim and its answer loses those
        # jobs to the reaper (they run again after their timeout), as for a worker that disappears.
        self._poll_interrupt.set()
        with self._lock:
            self._lock.notify_all()
        self._threads[0].join()
        deadline = time.monotonic() + self.shutdown_grace_seconds
        with self._lock:
            while self._running and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            left = list(self._running.values())
        for running in left:
            self._release(running)
        self._drained.set()
        self._interrupt_signals()
        with self._acks_cond:
            self._acks_cond.notify_all()
        for thread in self._threads[1:]:
            thread.join()
        self._pool.shutdown(wait=False)
        self._stopped.set()
        self.log.info("jobsvc worker %s stopped", self.worker_id)

    def _release(self, running: _Running) -> None:
        running.cancel(WorkerStopped("the worker stopped before the handler finished"))
        with running.lock:
            if running.settled:
                return
            running.settled = True
        with self._lock:
            self._running.pop(running.job["id"], None)
            self._lock.notify_all()
        try:
            self.client.workers.release(job_id=running.job["id"], worker_id=self.worker_id)
            self.log.info("jobsvc worker: job %s handed back", running.job["id"])
            return
        except JobsvcError as err:
            if err.code in _LOST_ATTEMPT_CODES:
                return
            self.log.warning("jobsvc worker: release of %s failed; acking the attempt failed: %r", running.job["id"], err)
        running.settled = False
        self._finish(running, "failed", running.cancel_reason)

    def _cancelled(self, running: _Running) -> None:
        """The service cancelled the job: the handler is told and the attempt acked failed at once,
        which ends the job cancelled."""
        if running.settled:
            return
        self.log.info("jobsvc worker: job %s was cancelled; stopping it", running.job["id"])
        running.cancel(JobCancelled("job %s was cancelled" % running.job["id"]))
        self._finish(running, "failed", running.cancel_reason)

    def _interrupt_signals(self) -> None:
        """Ends the signal poll in flight, so that it starts again with the jobs running now."""
        interrupt = self._signal_interrupt
        if interrupt is not None:
            interrupt.set()

    def _signal_loop(self) -> None:
        """Keeps one signal poll open while jobs run (POST /workers/signals), so that a cancel
        reaches the handler within about a second rather than at the next heartbeat."""
        failures = 0
        while self._has_signals and not self._drained.is_set():
            with self._lock:
                while not self._running and not self._drained.is_set():
                    self._lock.wait(0.5)
            time.sleep(_SIGNAL_WATCH_DELAY)
            interrupt = Interrupt()
            with self._lock:
                job_ids = list(self._running)[:_MAX_SIGNAL_JOBS]
                self._signal_interrupt = interrupt
            if not job_ids:
                continue
            try:
                answer = self.client.workers.signals(worker_id=self.worker_id, job_ids=job_ids, wait_seconds=_SIGNAL_WAIT_SECONDS, interrupt=interrupt)
                failures = 0
            except Exception as err:  # noqa: BLE001 - a worker never dies of a failed signal poll
                if interrupt.is_set():
                    continue
                if isinstance(err, JobsvcError) and err.code == "route_not_found":
                    self._has_signals = False
                    return
                # Cut short only when the worker has drained: cancels still matter during stop()'s grace.
                self._backoff("signal poll", err, failures, until=self._drained)
                failures += 1
                continue
            for job_id in answer.get("cancel", []):
                with self._lock:
                    running = self._running.get(job_id)
                if running is not None:
                    self._cancelled(running)

    def _backoff(self, what: str, err: BaseException, failures: int, interruptible: bool = True, until: Optional[threading.Event] = None) -> None:
        level = logging.WARNING if isinstance(err, JobsvcError) and err.is_transient else logging.ERROR
        self.log.log(level, "jobsvc worker: %s failed, retrying: %r", what, err)
        retry_after = getattr(err, "retry_after", None)
        delay = retry_after if retry_after is not None else random.uniform(0, min(self.backoff_max_seconds, self.backoff_base_seconds * 2 ** failures))
        if until is not None:
            until.wait(delay)
        elif interruptible:
            self._stopping.wait(delay)
        else:
            time.sleep(delay)

    def _poll_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            with self._lock:
                while len(self._running) >= self.concurrency and not self._stopping.is_set():
                    self._lock.wait()
                free = self.concurrency - len(self._running)
            if self._stopping.is_set():
                return
            try:
                answer = self.client.workers.poll(
                    worker_id=self.worker_id,
                    queues=self.queues,
                    job_types=self.job_types or None,
                    capacity=min(free, _MAX_POLL_CAPACITY),
                    wait_seconds=self.poll_wait_seconds,
                    interrupt=self._poll_interrupt,
                )
                failures = 0
            except Exception as err:  # noqa: BLE001 - a worker never dies of a failed poll
                if self._stopping.is_set():
                    return
                self._backoff("poll", err, failures)
                failures += 1
                continue
            # Jobs a poll claimed are run even when stop() began meanwhile: they are this worker's.
            for job in answer["jobs"]:
                self._start_job(job)

    def _start_job(self, job: JsonObject) -> None:
        running = _Running(job, max(job["timeout_seconds"] / 3.0, 10.0))
        with self._lock:
            self._running[job["id"]] = running
            self._lock.notify_all()
        self._interrupt_signals()
        self._pool.submit(self._execute, running)

    def _execute(self, running: _Running) -> None:
        handler = self.handlers.get(running.job["job_type"])
        try:
            if handler is None:
                raise LookupError("no handler for job type %s" % running.job["job_type"])
            value = handler(running.job, JobContext(self, running))
        except RateLimited as err:
            self._finish(running, "rate_limited", err)
        except BaseException as err:  # noqa: BLE001 - a handler's failure is its attempt's, not the worker's
            self._finish(running, "failed", err)
        else:
            self._finish(running, "succeeded", value=value)

    def _finish(self, running: _Running, status: str, err: Optional[BaseException] = None, value: Any = None) -> None:
        """Queues the attempt's ack; a success carries the handler's return value as its ``result``,
        a rate_limited one the RateLimited's retry_after_ms."""
        with running.lock:
            if running.settled:
                return
            running.settled = True
        ack: JsonObject = {
            "job_id": running.job["id"],
            "worker_id": self.worker_id,
            "status": status,
            "duration_ms": int((time.monotonic() - running.started) * 1000),
        }
        if status == "failed":
            ack["error"] = _error_detail(err)
        elif isinstance(err, RateLimited):
            ack["retry_after_ms"] = err.retry_after_ms
        elif value is not None:
            self._attach_result(ack, value)
        with self._acks_cond:
            self._acks.append(ack)
            self._acks_cond.notify_all()
        with self._lock:
            self._running.pop(running.job["id"], None)
            idle = not self._running
            self._lock.notify_all()
        if idle:
            self._interrupt_signals()

    def _tick_loop(self) -> None:
        while not self._drained.is_set():
            now = time.monotonic()
            with self._lock:
                running = list(self._running.values())
            for job in running:
                if job.cancelled.is_set() or job.settled:
                    continue
                if now >= job.deadline:
                    # Heartbeats end with the attempt's time, so a handler that ignores it is reaped.
                    job.cancel(JobTimeout("job %s ran past its timeout_seconds" % job.job["id"]))
                elif now >= job.next_beat:
                    job.next_beat = now + job.interval
                    self._beat(job)
            time.sleep(0.2)

    def _beat(self, running: _Running) -> None:
        if running.settled or running.cancelled.is_set():
            return
        body: JsonObject = {"job_id": running.job["id"], "worker_id": self.worker_id}
        if running.progress is not None:
            body["progress"] = running.progress
        try:
            if self.client.workers.heartbeat(**body).get("status") == "cancel":
                self._cancelled(running)
        except JobsvcError as err:
            if err.code in _LOST_ATTEMPT_CODES:
                self.log.warning("jobsvc worker: the service no longer gives this worker job %s (%s)", running.job["id"], err.code)
                running.cancel(err)
            else:
                self.log.warning("jobsvc worker: heartbeat of %s failed; the next one retries: %r", running.job["id"], err)

    def _ack_loop(self) -> None:
        failures, failing_since = 0, 0.0
        while True:
            with self._acks_cond:
                while not self._acks and not self._drained.is_set():
                    self._acks_cond.wait(0.5)
                if not self._acks:
                    return
                batch, self._acks[:] = self._acks[:_MAX_ACKS_PER_BATCH], self._acks[_MAX_ACKS_PER_BATCH:]
            again, error = self._send_acks(batch)
            if not again:
                failures = 0
                continue
            if failures == 0:
                failing_since = time.monotonic()
            if time.monotonic() - failing_since > _ACK_RETRY_SECONDS:
                self.log.error("jobsvc worker: acks given up for %s: %r", [a["job_id"] for a in again], error)
                failures = 0
                continue
            with self._acks_cond:
                self._acks[:0] = again
            self._backoff("ack of %d jobs" % len(again), error, failures, interruptible=False)
            failures += 1

    def _send_acks(self, acks: List[JsonObject]) -> Tuple[List[JsonObject], Optional[JobsvcError]]:
        """Sends the acks in one batch; returns those to send again and the error that says why."""
        try:
            answer = self.client.workers.ack_batch(acks)
        except JobsvcError as err:
            return [a for a in acks if self._is_ack_to_retry(a, err)], err
        again: List[JsonObject] = []
        error: Optional[JobsvcError] = None
        for ack, result in zip(acks, answer["results"]):
            if "error" in result:
                e = result["error"]
                err = JobsvcError(e["code"], result["status"], e["message"], e.get("request_id"))
                if self._is_ack_to_retry(ack, err):
                    again.append(ack)
                    error = err
        return again, error

    def _attach_result(self, ack: JsonObject, value: Any) -> None:
        """The handler's return value as the ack's ``result``, as JSON; none when JSON cannot hold it."""
        try:
            ack["result"] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as err:
            self.log.error("jobsvc worker: job %s returned a value JSON cannot hold; acked without a result: %r", ack["job_id"], err)

    def _is_ack_to_retry(self, ack: JsonObject, err: JobsvcError) -> bool:
        if err.is_transient:
            return True
        if err.code == "invalid_request" and "result" in ack:
            # The service refused the result (over 64 KiB, or text it cannot store): the job still succeeded.
            self.log.error("jobsvc worker: the result of %s was refused; acked without it: %s", ack["job_id"], err)
            del ack["result"]
            return True
        if err.code in _LOST_ATTEMPT_CODES:
            self.log.warning("jobsvc worker: late ack of %s ignored; the attempt was no longer this worker's (%s)", ack["job_id"], err.code)
        else:
            self.log.error("jobsvc worker: ack of %s refused: %r", ack["job_id"], err)
        return False
