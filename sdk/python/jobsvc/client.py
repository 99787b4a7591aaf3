"""A client of every /jobsvc/v1 route an API key may call; each method returns the body as a dict."""

from __future__ import annotations

import dataclasses
import datetime
import http.client
import json
import logging
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from email.message import Message
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

V1 = "/jobsvc/v1"

JsonObject = Dict[str, Any]
"""A JSON object of the API, as json.loads gives it: field names as the API spells them."""

Instant = Union[str, datetime.datetime]
"""An RFC 3339 string, or a datetime with a time zone (a naive one names no instant)."""

EventHandler = Callable[[List[JsonObject]], object]
"""What EventConsumers.run calls with each batch of events; returning commits the batch."""

# The longest wait between a feed follower's (or a consumer runner's) attempts while the service is
# unreachable, overloaded or restarting.
_FOLLOW_MAX_BACKOFF_SECONDS = 30.0

# With no long poll, a consumer runner's pause after an empty answer, so that an idle runner does
# not spend the project's hourly requests.
_IDLE_PAUSE_SECONDS = 1.0


class JobsvcError(Exception):
    """An error answer of the service (its envelope's code, the HTTP status, the request id) or a
    request that got no answer (status 0, code "network_error"). Branch on code, never on the message."""

    def __init__(self, code: str, status: int, message: str, request_id: Optional[str] = None, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after

    @property
    def is_transient(self) -> bool:
        """Whether the same request may succeed later: no answer, a 5xx or a rate limit."""
        return self.status == 0 or self.status >= 500 or self.status == 429

    def __repr__(self) -> str:
        return "JobsvcError(code=%r, status=%r, request_id=%r)" % (self.code, self.status, self.request_id)


class CursorExpiredError(JobsvcError):
    """410 cursor_expired from the event feed: retention removed events after the cursor, so reading
    on from it would skip them silently. oldest_cursor is the oldest cursor from which nothing the
    log still holds is missing; resuming there is the caller's decision, since the gap is its loss."""

    def __init__(
        self, code: str, status: int, message: str, oldest_cursor: str, request_id: Optional[str] = None, retry_after: Optional[float] = None
    ) -> None:
        super().__init__(code, status, message, request_id, retry_after)
        self.oldest_cursor = oldest_cursor


class StaleCommitError(JobsvcError):
    """409 invalid_state from a named consumer's commit: the range this ack_cursor acknowledges is
    no longer out, because its lease ran out and it went to another poll, or a seek moved the
    consumer and dropped it. Its events are handled again elsewhere (or from where the seek put the
    consumer): there is nothing left to commit, and nothing to retry."""

    def __init__(
        self, code: str, status: int, message: str, ack_cursor: str, request_id: Optional[str] = None, retry_after: Optional[float] = None
    ) -> None:
        super().__init__(code, status, message, request_id, retry_after)
        self.ack_cursor = ack_cursor


def _error_from(status: int, headers: Optional[Message], raw: Optional[bytes]) -> JobsvcError:
    try:
        error = json.loads(raw or b"{}").get("error") or {}
    except ValueError:
        error = {}
    retry_after = headers.get("Retry-After") if headers is not None else None
    fields = dict(
        code=error.get("code") or "http_%d" % status,
        status=status,
        message=error.get("message") or "HTTP %d" % status,
        request_id=error.get("request_id") or (headers.get("X-Request-Id") if headers is not None else None),
        retry_after=float(retry_after) if retry_after and retry_after.replace(".", "", 1).isdigit() else None,
    )
    if fields["code"] == "cursor_expired" and isinstance(error.get("oldest_cursor"), str):
        return CursorExpiredError(oldest_cursor=error["oldest_cursor"], **fields)
    return JobsvcError(**fields)


def _origin(url: str) -> Tuple[str, str, Optional[int]]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


class _KeyStaysHome(urllib.request.HTTPRedirectHandler):
    """urllib copies every header onto a redirect, Authorization included, to whatever host the
    Location names: a redirect elsewhere would hand it the API key. It follows the redirect
    without it when the target's origin (scheme, host, port) is not the request's."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: http.client.HTTPMessage, newurl: str
    ) -> Optional[urllib.request.Request]:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


class Interrupt:
    """Cuts requests short from another thread, as an AbortSignal does a fetch: set() shuts the
    socket of the request in flight down, and any later request made with it fails before it is
    sent. Each fails with JobsvcError network_error. The worker's stop() ends its long poll so.
    urllib has no such call, and closing a socket does not wake a thread blocked reading it:
    shutting it down does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._is_set = False
        self._connection: Optional[http.client.HTTPConnection] = None

    def is_set(self) -> bool:
        return self._is_set

    def set(self) -> None:
        with self._lock:
            self._is_set = True
            connection, self._connection = self._connection, None
        if connection is not None:
            _shut_down(connection)

    def _connected(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._is_set:
                self._connection = connection
                return
        _shut_down(connection)


def _shut_down(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _InterruptibleRequest(urllib.request.Request):
    def __init__(self, *args: Any, interrupt: Optional[Interrupt] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.interrupt = interrupt


def _reporting_connection(http_class: Any, interrupt: Interrupt) -> Callable[..., http.client.HTTPConnection]:
    """http_class, whose connections tell interrupt their socket once connected (the connection
    connects inside urllib, where nothing else can reach it)."""

    def connection(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection = http_class(*args, **kwargs)
        connect = conn.connect

        def connect_and_report() -> None:
            connect()
            interrupt._connected(conn)

        conn.connect = connect_and_report  # type: ignore[method-assign]
        return conn

    return connection


class _InterruptibleOpen:
    def do_open(self, http_class: Any, req: urllib.request.Request, **http_conn_args: Any) -> http.client.HTTPResponse:
        interrupt = getattr(req, "interrupt", None)
        if interrupt is not None:
            http_class = _reporting_connection(http_class, interrupt)
        return super().do_open(http_class, req, **http_conn_args)  # type: ignore[misc]


class _HTTPHandler(_InterruptibleOpen, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_InterruptibleOpen, urllib.request.HTTPSHandler):
    pass


_opener = urllib.request.build_opener(_KeyStaysHome, _HTTPHandler, _HTTPSHandler)


def _quote(value: object) -> str:
    return urllib.parse.quote(str(value), safe="")


class Client:
    """`Client(base_url, api_key)`: `client.jobs.create(job_type=..., payload=...)` and the rest."""

    def __init__(self, base_url: str, api_key: str, max_retries: int = 3, retry_base_seconds: float = 0.2, timeout: float = 60) -> None:
        if not base_url or not api_key:
            raise ValueError("base_url and api_key are required")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.max_retries = max_retries
        self.retry_base_seconds = retry_base_seconds
        self.timeout = timeout
        self.jobs = Jobs(self)
        self.workers = Workers(self)
        self.webhooks = Webhooks(self)
        self.recurring = Recurring(self)
        self.alerts = Alerts(self)
        self.retry_policy = RetryPolicy(self)
        self.queues = Queues(self)
        self.activity = Activity(self)
        self.metrics = Metrics(self)
        self.event_consumers = EventConsumers(self)
        self.operations = Operations(self)
        self.audit = Audit(self)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Optional[Mapping[str, Any]] = None,
        repeat: str = "safe",
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
        raw: bool = False,
        interrupt: Optional[Interrupt] = None,
    ) -> Any:
        """Sends one call and returns the parsed JSON answer (None for 204), or the open response
        when raw. repeat is "key" (send an Idempotency-Key and retry with it), "safe" (retry without
        one) or "once" (never retry: the worker's loops decide). Retries follow no answer and 5xx."""
        url = self.base_url + path
        if query:
            pairs = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in query.items() if v is not None]
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        headers = {"Authorization": "Bearer " + self.api_key, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if repeat == "key":
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        attempt = 0
        while True:
            req = _InterruptibleRequest(url, data=data, method=method, headers=headers, interrupt=interrupt)
            try:
                res = _opener.open(req, timeout=timeout or self.timeout)
                if raw:
                    return res
                with res:
                    payload = res.read()
                return json.loads(payload) if payload else None
            except urllib.error.HTTPError as err:
                with err:
                    error = _error_from(err.code, err.headers, err.read())
            except (urllib.error.URLError, OSError) as err:
                error = JobsvcError("network_error", 0, "%s %s: %s" % (method, path, err))
            retryable = error.status == 0 or error.status >= 500
            if repeat == "once" or not retryable or attempt >= self.max_retries:
                raise error
            delay = error.retry_after if error.retry_after is not None else random.uniform(0, min(5.0, self.retry_base_seconds * 2 ** attempt))
            time.sleep(delay)
            attempt += 1

    def events_page(
        self,
        after: Optional[str] = None,
        types: Union[str, Iterable[str], None] = None,
        queue: Optional[str] = None,
        job_type: Optional[str] = None,
        job_id: Optional[str] = None,
        from_time: Optional[Instant] = None,
        limit: Optional[int] = None,
        wait: Optional[float] = None,
    ) -> JsonObject:
        """One page of the project's events, oldest first (GET /events): {"data", "next_cursor",
        "has_more"}. Pass next_cursor as after for the next page. types is a list of event types (or
        one), from_time an RFC 3339 string or an aware datetime, wait 0-30 s of long poll."""
        query = _feed_query(after, types, queue, job_type, job_id, from_time, limit, wait)
        return self.request("GET", V1 + "/events", query=query, timeout=(wait or 0) + self.timeout)

    def events(
        self,
        after: Optional[str] = None,
        types: Union[str, Iterable[str], None] = None,
        queue: Optional[str] = None,
        job_type: Optional[str] = None,
        job_id: Optional[str] = None,
        from_time: Optional[Instant] = None,
        limit: int = 500,
        wait: float = 20,
    ) -> Iterator[JsonObject]:
        """Yields the project's events, oldest first, then each one as it is appended: long polls
        of `wait` seconds, each page resumed at the last page's next_cursor (so filtered-out events
        are not read again). No answer, 5xx and 429 are waited out with back-off for as long as they
        last; any other error is raised, CursorExpiredError among them. Nothing is stored: to resume
        after a restart, keep the "cursor" of the last event handled. Stop with break."""
        query = _feed_query(after, types, queue, job_type, job_id, from_time, limit, wait)
        failures = 0
        while True:
            try:
                page = self.request("GET", V1 + "/events", query=query, repeat="once", timeout=(wait or 0) + self.timeout)
                failures = 0
            except JobsvcError as err:
                if not err.is_transient:
                    raise
                backoff = random.uniform(0, min(_FOLLOW_MAX_BACKOFF_SECONDS, self.retry_base_seconds * 2 ** failures))
                time.sleep(err.retry_after if err.retry_after is not None else backoff)
                failures += 1
                continue
            for event in page["data"]:
                yield event
            query = dict(query, after=page["next_cursor"], from_time=None)


def _feed_query(
    after: Optional[str],
    types: Union[str, Iterable[str], None],
    queue: Optional[str],
    job_type: Optional[str],
    job_id: Optional[str],
    from_time: Optional[Instant],
    limit: Optional[int],
    wait: Optional[float],
) -> Dict[str, Any]:
    return {
        "after": after,
        "from_time": from_time.isoformat() if hasattr(from_time, "isoformat") else from_time,
        "types": _types_text(types),
        "queue": queue,
        "job_type": job_type,
        "job_id": job_id,
        "limit": limit,
        "wait": wait,
    }


def _types_text(types: Union[str, Iterable[str], None]) -> Optional[str]:
    """A list of event types (or one) as the comma-separated text the service takes; None for every type."""
    if types is None:
        return None
    listed = [types] if isinstance(types, str) else list(types)
    # The service reads an empty types as no filter at all: an empty list must not widen to every type.
    if not listed:
        raise ValueError("types names no event type; pass None to read every type")
    return ",".join(listed)


def _instant(value: Instant) -> str:
    """An RFC 3339 string as given, or an aware datetime as one (a naive one names no instant)."""
    if hasattr(value, "isoformat"):
        if getattr(value, "tzinfo", None) is None:
            raise ValueError("a datetime without a time zone names no instant; pass an aware one")
        return value.isoformat()
    return value


def _window(from_: Optional[Instant], until: Optional[Instant]) -> Dict[str, Optional[str]]:
    """A time window's query: "from" is a Python keyword, so the calls take it as from_."""
    return {"from": None if from_ is None else _instant(from_), "until": None if until is None else _instant(until)}


def _every_item(fetch_page: Callable[[Dict[str, Any]], JsonObject], query: Dict[str, Any]) -> Iterator[JsonObject]:
    cursor = query.pop("cursor", None)
    while True:
        page = fetch_page(dict(query, cursor=cursor))
        for item in page["data"]:
            yield item
        if not page.get("has_more") or not page.get("next_cursor"):
            return
        cursor = page["next_cursor"]


class _Resource:
    def __init__(self, client: Client) -> None:
        self._client = client

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._client.request(method, V1 + path, **kwargs)


class Jobs(_Resource):
    def create(self, idempotency_key: Optional[str] = None, **fields: Any) -> JsonObject:
        """POST /jobs with the API's field names (job_type, payload, queue, run_at, ttl_seconds,
        ...). ttl_seconds (extension): a job not claimed within it of becoming due ends cancelled
        with cancel_reason "expired"; left out, the queue's default applies. An Idempotency-Key is
        generated unless given, and reused on retries: never two jobs.

        dedup (extension): {"key", "scope": "queue"|"project", "while": "pending"|"active"|
        {"window_seconds": n}, "on_duplicate": "skip"|"replace_payload"|"keep_latest_queued"}. A create whose key is held creates
        nothing and returns the existing job's detail with "deduplicated": True (the API's 200);
        a new job returns the usual 201 body, without "deduplicated". debounce (extension):
        {"key", "seconds", "max_wait_seconds"}: runs once, with the last payload, after a quiet
        period; a create within it returns the scheduled job with "deduplicated": True.
        concurrency_key (extension, 1-500 characters): the key the queue's per-key flow limits
        count the job under (Queues.set_limits). depends_on (extension, 1-100 job ids): the job waits
        "scheduled" until every parent has ended, then runs with their results (the worker's
        ctx.parent_results); on_parent_failure ("cancel", the default, "run" or "ignore") says what
        a parent that is dead-lettered or cancelled does to it."""
        return self._call("POST", "/jobs", body=fields, repeat="key", idempotency_key=idempotency_key)

    def create_batch(self, jobs: Iterable[JsonObject], idempotency_key: Optional[str] = None) -> JsonObject:
        """Each item is a create's body (ttl_seconds, dedup, concurrency_key and depends_on included); a duplicate item's result
        is {"status": 200, "body": <the existing job, "deduplicated": True>}."""
        return self._call("POST", "/jobs/batch", body={"jobs": list(jobs)}, repeat="key", idempotency_key=idempotency_key)

    def get(self, job_id: str, as_of: Optional[Instant] = None) -> JsonObject:
        """The job now; with as_of (an RFC 3339 string or an aware datetime, or an event's "cursor"
        from history() or the event feed), the job as it was then, with "as_of": {"sequence",
        "latest_sequence", "time"?}. Before its creation: job_not_found; a moment whose history
        retention removed: history_expired (410)."""
        query = None if as_of is None else {"as_of": _instant(as_of)}
        return self._call("GET", "/jobs/" + _quote(job_id), query=query)

    def list(self, **query: Any) -> JsonObject:
        return self._call("GET", "/jobs", query=query)

    def list_all(self, **query: Any) -> Iterator[JsonObject]:
        """Every job the filter matches, newest first, following next_cursor."""
        return _every_item(lambda q: self.list(**q), query)

    def cancel(self, job_id: str, include_running: bool = False) -> JsonObject:
        """Cancels a pending or scheduled job: {id, state: "cancelled"}. With include_running (an
        extension) a processing job is asked to stop instead of refused: {id, state: "processing",
        cancel_requested: True}; its worker's ctx.cancelled is set within a second and the job
        ends cancelled."""
        body = {"include_running": True} if include_running else None
        return self._call("POST", "/jobs/%s/cancel" % _quote(job_id), body=body, repeat="key")

    def set_priority(self, job_id: str, priority: int) -> JsonObject:
        """Changes a pending or scheduled job's priority (an extension: -600 to 600 seconds, higher
        sooner; claims take due jobs by due time minus priority) and returns the job. Another state
        is invalid_state. The same priority again changes nothing."""
        return self._call("PATCH", "/jobs/" + _quote(job_id), body={"priority": priority}, repeat="key")

    def retry(self, job_id: str) -> JsonObject:
        return self._call("POST", "/jobs/%s/retry" % _quote(job_id), repeat="key")

    def bulk(
        self,
        action: str,
        filter: Mapping[str, Any],
        priority: Optional[int] = None,
        dry_run: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> JsonObject:
        """POST /jobs/bulk (an extension, admins only): action "retry" or "cancel" on every job the
        filter matches (ids, states, queues, job_types, tags, error_type, created_from/created_until,
        finished_from/finished_until; at least one; instants as RFC 3339 strings or aware datetimes).
        Returns {"operation_id", "matched"} (client.operations.wait follows it), or {"matched",
        "sample_ids"} with dry_run. More jobs than the plan allows: 409 bulk_limit_exceeded."""
        fields = {k: (_instant(v) if k.endswith(("_from", "_until")) else v) for k, v in filter.items()}
        body: Dict[str, Any] = {"action": action, "filter": fields}
        if priority is not None:
            body["priority"] = priority
        if dry_run:
            body["dry_run"] = True
        return self._call("POST", "/jobs/bulk", body=body, repeat="key", idempotency_key=idempotency_key)

    def history(
        self,
        job_id: str,
        types: Union[str, Iterable[str], None] = None,
        since: Optional[Instant] = None,
        until: Optional[Instant] = None,
        **query: Any,
    ) -> JsonObject:
        """One page of the job's events, oldest first: {"job_id", "data", "has_more", "next_cursor"};
        each event's "cursor" is what get(as_of=) takes. types is a list of event types (or one),
        since and until RFC 3339 strings or aware datetimes (inclusive); limit and cursor page it."""
        filters = {
            "types": _types_text(types),
            "since": None if since is None else _instant(since),
            "until": None if until is None else _instant(until),
        }
        return self._call("GET", "/jobs/%s/history" % _quote(job_id), query=dict(query, **filters))

    def dependencies(self, job_id: str) -> JsonObject:
        """The job's workflow (an extension): {"job_id", "state", "on_parent_failure", "waiting_for",
        "parents", "children", "children_total"}. Each parent named in its depends_on, in order, with
        its "state", "result", last "error" and "waiting" (the job still waits for it); its
        children (graph jobs and continuations) with their "state", the first 200. A continuation's
        one parent is its parent_job_id, not among "parents"."""
        return self._call("GET", "/jobs/%s/dependencies" % _quote(job_id))

    def events(self, job_id: str) -> Iterator[JsonObject]:
        """The progress stream: yields each snapshot dict until a terminal state."""
        terminal = {"succeeded", "failed", "cancelled", "dead_letter"}
        last = None
        while True:
            res = self._call("GET", "/jobs/%s/events" % _quote(job_id), raw=True, timeout=130)
            with res:
                event, data = "message", []
                for raw_line in res:
                    line = raw_line.decode("utf-8").rstrip("\r\n")
                    if line == "":
                        if event == "snapshot" and data:
                            snapshot = json.loads("\n".join(data))
                            if snapshot != last:
                                yield snapshot
                            last = snapshot
                            if snapshot["state"] in terminal:
                                return
                        event, data = "message", []
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))

    def export(
        self,
        from_: Optional[Instant] = None,
        until: Optional[Instant] = None,
        attest: bool = False,
        as_text: bool = False,
        **query: Any,
    ) -> Iterator[Union[JsonObject, str]]:
        """GET /jobs/export of the window from_ to until (RFC 3339 strings or aware datetimes),
        streamed: yields the JSONL rows as dicts (or CSV lines as text). attest=True (JSONL only,
        admin) gives each row its job's events in the Merkle log ("attestation") and ends the export
        with a signed {"manifest": ...} row (docs/audit.md, Attested exports). as_text=True yields
        the JSONL lines as the text they came in, to store or to hand to jobsvc.audit.verify_export."""
        query = dict(query, **{k: v for k, v in _window(from_, until).items() if v is not None})
        if attest:
            query["attest"] = True
        res = self._call("GET", "/jobs/export", query=query, repeat="once", raw=True)
        csv = "csv" in (res.headers.get("Content-Type") or "")
        with res:
            for raw_line in res:
                line = raw_line.decode("utf-8")
                if csv or as_text:
                    yield line
                elif line.strip():
                    yield json.loads(line)


class Workers(_Resource):
    def register(self, **fields: Any) -> JsonObject:
        return self._call("POST", "/workers/register", body=fields)

    def poll(self, interrupt: Optional[Interrupt] = None, **fields: Any) -> JsonObject:
        """POST /workers/poll: {"jobs": [...]}. interrupt.set() from another thread cuts the long
        poll short (it then raises JobsvcError network_error), as the worker's stop() does."""
        return self._call("POST", "/workers/poll", body=fields, repeat="once", timeout=fields.get("wait_seconds", 30) + 30, interrupt=interrupt)

    def heartbeat(self, **fields: Any) -> JsonObject:
        return self._call("POST", "/workers/heartbeat", body=fields, repeat="once")

    def ack(self, **fields: Any) -> JsonObject:
        """POST /workers/ack: {job_id, worker_id, status: "succeeded"|"failed", ...}, or (an extension)
        status="rate_limited" with retry_after_ms (1 to 86,400,000): the job is put back, due that
        long from now, without spending its attempt, and its concurrency key (or, without a
        per-key limit, its queue) is held back until then; answers {"action": "retry", "retry_at"}."""
        return self._call("POST", "/workers/ack", body=fields, repeat="once")

    def release(self, **fields: Any) -> JsonObject:
        """POST /workers/release (an extension): {job_id, worker_id, delay_seconds?} hands a running
        job back, pending again (or scheduled for delay_seconds) without spending its attempt."""
        return self._call("POST", "/workers/release", body=fields, repeat="once")

    def signals(self, interrupt: Optional[Interrupt] = None, **fields: Any) -> JsonObject:
        """POST /workers/signals (an extension): {worker_id, job_ids, wait_seconds?} waits for one of
        job_ids to be cancelled and answers {"cancel": [...]}, the jobs to stop; interrupt cuts it short."""
        return self._call("POST", "/workers/signals", body=fields, repeat="once", timeout=fields.get("wait_seconds", 25) + 30, interrupt=interrupt)

    def ack_batch(self, acks: Iterable[JsonObject]) -> JsonObject:
        return self._call("POST", "/workers/ack/batch", body={"acks": list(acks)}, repeat="once")


class _Settings(_Resource):
    """A project's settings of one kind (webhooks, alerts): list, get, create, update, delete.
    update is a PUT (every setting, safe to repeat) unless the kind patches (a PATCH, keyed)."""

    path: str = ""
    patches = False

    def list(self) -> JsonObject:
        return self._call("GET", self.path)

    def get(self, item_id: str) -> JsonObject:
        return self._call("GET", self._item(item_id))

    def create(self, **fields: Any) -> JsonObject:
        return self._call("POST", self.path, body=fields, repeat="key")

    def update(self, item_id: str, **fields: Any) -> JsonObject:
        if self.patches:
            return self._call("PATCH", self._item(item_id), body=fields, repeat="key")
        return self._call("PUT", self._item(item_id), body=fields)

    def delete(self, item_id: str) -> None:
        return self._call("DELETE", self._item(item_id), repeat="key")

    def _item(self, item_id: str) -> str:
        return self.path + "/" + _quote(item_id)


class Webhooks(_Settings):
    path = "/webhooks"
    patches = True

    def rotate_secret(self, webhook_id: str) -> JsonObject:
        return self._call("POST", "/webhooks/%s/rotate-secret" % _quote(webhook_id), repeat="key")

    def deliveries(self, webhook_id: str, **query: Any) -> JsonObject:
        return self._call("GET", "/webhooks/%s/deliveries" % _quote(webhook_id), query=query)

    def redeliver(self, webhook_id: str, delivery_id: str, idempotency_key: Optional[str] = None) -> JsonObject:
        """A new delivery of the same event (same event id and body), signed with the current secret
        when sent; 409 invalid_state while the delivery is still pending, the subscription inactive,
        or the event gone from the log."""
        path = "/webhooks/%s/deliveries/%s/redeliver" % (_quote(webhook_id), _quote(delivery_id))
        return self._call("POST", path, repeat="key", idempotency_key=idempotency_key)

    def replay(
        self,
        webhook_id: str,
        since: Instant,
        mode: str,
        until: Optional[Instant] = None,
        event_types: Union[str, Iterable[str], None] = None,
        dry_run: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> JsonObject:
        """Sends the subscription's webhook events of a time range again, read from the log: mode
        "failed", "missing" or "all"; since and until RFC 3339 strings or aware datetimes. Returns
        {"operation_id", "matched"} (client.operations.get follows it), or {"matched"} with dry_run."""
        body: Dict[str, Any] = {"since": _instant(since), "mode": mode}
        if until is not None:
            body["until"] = _instant(until)
        if event_types is not None:
            body["event_types"] = [event_types] if isinstance(event_types, str) else list(event_types)
        if dry_run:
            body["dry_run"] = True
        return self._call("POST", "/webhooks/%s/replay" % _quote(webhook_id), body=body, repeat="key", idempotency_key=idempotency_key)


class Recurring(_Resource):
    def list(self, **query: Any) -> JsonObject:
        return self._call("GET", "/recurring", query=query)

    def upsert(self, schedule_id: str, **fields: Any) -> JsonObject:
        """fields as the API names them; ttl_seconds (extension) is given to every occurrence."""
        return self._call("PUT", "/recurring/" + _quote(schedule_id), body=fields)

    def delete(self, schedule_id: str) -> None:
        return self._call("DELETE", "/recurring/" + _quote(schedule_id), repeat="key")


class Alerts(_Settings):
    path = "/alerts"


class RetryPolicy(_Resource):
    """The project's retry policy and its per-queue overrides: what an ack's retry_at and a new
    job's default max_attempts follow. set() and set_for_queue() replace every field
    (base_delay_seconds, factor, max_delay_seconds, jitter_seconds, max_attempts)."""

    def get(self, queue: Optional[str] = None) -> JsonObject:
        return self._call("GET", self._path(queue))

    def set(self, queue: Optional[str] = None, **policy: Any) -> JsonObject:
        return self._call("PUT", self._path(queue), body=policy)

    def remove(self, queue: Optional[str] = None) -> None:
        """Back to the service's default, or for a queue, to the project's policy."""
        return self._call("DELETE", self._path(queue))

    def _path(self, queue: Optional[str]) -> str:
        return "/retry-policy" if queue is None else "/queues/%s/retry-policy" % _quote(queue)


class Queues(_Resource):
    """Pausing and resuming queues: a paused queue's jobs are created but handed to no poll until
    it is resumed or its until passes. Pausing and resuming need the project role admin. A queue's
    settings, and its flow limits (an extension): how many of its jobs run at once and how fast
    they start."""

    def list(self, **query: Any) -> JsonObject:
        """The paused queues, then every queue holding jobs: {data: [{queue, paused, reason, until,
        paused_at, paused_by, counts, total}], has_more}."""
        return self._call("GET", "/queues", query=query)

    def pause(self, queue: str, reason: Optional[str] = None, until: Optional[Instant] = None) -> JsonObject:
        """until: when the queue resumes by itself (RFC 3339 text or an aware datetime); None: until resumed."""
        body: Dict[str, Any] = {}
        if reason is not None:
            body["reason"] = reason
        if until is not None:
            body["until"] = _instant(until)
        return self._call("POST", "/queues/%s/pause" % _quote(queue), body=body)

    def resume(self, queue: str) -> JsonObject:
        """Wakes the queue's waiting polls at once; a queue that is not paused is answered as it is."""
        return self._call("POST", "/queues/%s/resume" % _quote(queue), body={})

    def set_settings(self, queue: str, default_ttl_seconds: Optional[int]) -> JsonObject:
        """default_ttl_seconds: the ttl_seconds of jobs created in the queue without their own (1 to
        2,592,000; None removes it); a job not claimed within it of becoming due ends cancelled with
        cancel_reason "expired". Needs the project role admin. Answers {queue, default_ttl_seconds}."""
        return self._call("PUT", "/queues/%s/settings" % _quote(queue), body={"default_ttl_seconds": default_ttl_seconds})

    def set_limits(self, queue: str, concurrency: Optional[JsonObject] = None, rate: Optional[JsonObject] = None) -> JsonObject:
        """Replaces the queue's flow limits; at least one of them. concurrency: {"limit"?, "per_key"?:
        {"limit", "by"}, "strategy"?: "queue"|"cancel_newest"|"cancel_in_progress"}, with limit or
        per_key; rate: {"limit", "period_seconds", "burst"?, "by"?}. by is "concurrency_key",
        "job_type" or "tag:<name>". A poll is handed only the jobs a limit lets start; the others
        wait, pending. Needs the project role admin. Answers the limits as get_limits does."""
        body = {name: value for name, value in (("concurrency", concurrency), ("rate", rate)) if value is not None}
        return self._call("PUT", self._limits(queue), body=body)

    def get_limits(self, queue: str) -> JsonObject:
        """{queue, concurrency, rate, updated_at}; concurrency, rate and updated_at are None when the
        queue has no limits."""
        return self._call("GET", self._limits(queue))

    def delete_limits(self, queue: str) -> None:
        """The queue's jobs start as they did before it had limits. Needs the project role admin."""
        return self._call("DELETE", self._limits(queue))

    def get_limits_state(self, queue: str) -> JsonObject:
        """The limits at work now: {queue, limits, running, waiting, oldest_waiting_since, tokens,
        held_until, keys_at_limit, keys}; keys holds the same counts for the 50 keys with the most
        jobs waiting."""
        return self._call("GET", self._limits(queue) + "/state")

    def _limits(self, queue: str) -> str:
        return "/queues/%s/limits" % _quote(queue)


class Activity(_Resource):
    def list(self, **query: Any) -> JsonObject:
        return self._call("GET", "/activity", query=query)

    def list_all(self, **query: Any) -> Iterator[JsonObject]:
        return _every_item(lambda q: self.list(**q), query)


class Metrics(_Resource):
    def summary(self, **query: Any) -> JsonObject:
        return self._call("GET", "/metrics/summary", query=query)

    def throughput(self, **query: Any) -> JsonObject:
        return self._call("GET", "/metrics/throughput", query=query)

    def queues(self, **query: Any) -> JsonObject:
        return self._call("GET", "/metrics/queues", query=query)

    def job_types(self, **query: Any) -> JsonObject:
        return self._call("GET", "/metrics/job-types", query=query)


class Operations(_Resource):
    """The project's long-running actions: webhook replays and bulk job actions."""

    def get(self, operation_id: str) -> JsonObject:
        return self._call("GET", "/operations/" + _quote(operation_id))

    def list(self, **query: Any) -> JsonObject:
        """Newest first; limit 1-100 (default 50), cursor."""
        return self._call("GET", "/operations", query=query)

    def list_all(self, **query: Any) -> Iterator[JsonObject]:
        return _every_item(lambda q: self.list(**q), query)

    def wait(
        self,
        operation_id: str,
        interval: float = 1.0,
        timeout: Optional[float] = None,
        on_progress: Optional[Callable[[JsonObject], None]] = None,
    ) -> JsonObject:
        """Polls the operation every interval seconds until it is no longer "running", calling
        on_progress with each reading; returns it as it ended. Past timeout (seconds) raises
        TimeoutError; the operation runs on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            op = self.get(operation_id)
            if on_progress is not None:
                on_progress(op)
            if op["status"] != "running":
                return op
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("operation %s still running after %s s" % (operation_id, timeout))
            time.sleep(interval)

    def cancel(self, operation_id: str) -> JsonObject:
        """Stops a running operation (what it did stays done) and returns it "cancelled"; again on a
        cancelled one returns it as it is; one that ended otherwise is 409 invalid_state."""
        return self._call("DELETE", "/operations/" + _quote(operation_id), repeat="key")


@dataclasses.dataclass(frozen=True)
class EventVerdict:
    """What client.audit.verify_event() found. verified: the event's leaf, recomputed here, is at
    leaf_index in the tree of checkpoint (by proof), whose signature verifies with key (its entry
    in the keys document). Otherwise reason says why it was refused."""

    verified: bool
    leaf_index: int
    reason: Optional[str] = None
    checkpoint: Optional[JsonObject] = None
    key: Optional[JsonObject] = None
    proof: Optional[JsonObject] = None


class Audit(_Resource):
    """The project's Merkle log (docs/audit.md): signed checkpoints, inclusion and consistency
    proofs, the signing keys, and verify_event(), which proves a feed event with them. Checkpoints
    and proofs need admin (or the API key); keys() needs no credentials."""

    def issue_checkpoint(self, idempotency_key: Optional[str] = None) -> JsonObject:
        """A checkpoint signed now over every event the log has taken in, or the newest one when the
        tree has not grown since it. Keep it outside the service: a checkpoint you hold is what makes
        a log that lost its newest events detectable."""
        return self._call("POST", "/audit/checkpoints", repeat="key", idempotency_key=idempotency_key)

    def checkpoints(
        self, from_: Optional[Instant] = None, until: Optional[Instant] = None, after: Optional[Union[str, int]] = None, limit: Optional[int] = None
    ) -> JsonObject:
        """One page of the project's checkpoints, smallest tree first: {"data", "has_more",
        "next_cursor"}; pass next_cursor as after for the next. from_ (issued at or after) and until
        (before) are RFC 3339 strings or aware datetimes."""
        query = {"after": after, "limit": limit, **_window(from_, until)}
        return self._call("GET", "/audit/checkpoints", query=query)

    def all_checkpoints(self, from_: Optional[Instant] = None, until: Optional[Instant] = None, limit: Optional[int] = None) -> Iterator[JsonObject]:
        """Every checkpoint the filter matches, smallest tree first, page after page."""
        # The list pages by after (a tree size) where the other lists take cursor.
        return _every_item(lambda q: self.checkpoints(from_, until, q["cursor"], limit), {})

    def inclusion_proof(self, leaf_index: int, tree_size: int) -> JsonObject:
        """The hashes from leaf leaf_index to the root of the first tree_size leaves (RFC 9162 2.1.3)."""
        return self._call("GET", "/audit/proofs/inclusion", query={"leaf_index": leaf_index, "tree_size": tree_size})

    def consistency_proof(self, first: int, second: int) -> JsonObject:
        """The hashes that prove the tree of first leaves a prefix of the tree of second (RFC 9162 2.1.4)."""
        return self._call("GET", "/audit/proofs/consistency", query={"first": first, "second": second})

    def keys(self) -> JsonObject:
        """Every key that ever signed, with its window. Save it beside the checkpoints you keep."""
        return self._call("GET", "/audit/keys")

    def verify_event(self, event: Mapping[str, Any], keys: Optional[JsonObject] = None, checkpoint: Optional[JsonObject] = None) -> EventVerdict:
        """Proves that a feed event (from client.events(), events_page() or a named consumer) is in
        the project's log as the service signed it: the event's leaf, recomputed here, with an
        inclusion proof, leads to the root of a checkpoint whose signature verifies with the keys
        (jobsvc.audit's checks). The service is trusted for nothing but the keys, and not for those
        when you pass keys you saved. The checkpoint is checkpoint when given, else the oldest one
        whose tree holds the event, or one issued now when none does yet. A refusal is a verdict
        (verified False, with the reason); a failed request raises its JobsvcError, and an event
        without a leaf_index (the log had not taken it in when it was read) a ValueError."""
        from . import audit  # the offline verifier, loaded when first needed

        index = event.get("leaf_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError("the event has no leaf_index: the audit log had not taken it in when it was read; read it from the feed again")
        try:
            trusted = keys if keys is not None else self.keys()
            head = checkpoint if checkpoint is not None else self._checkpoint_holding(index)
            key = audit.verify_checkpoint(head, trusted)
            if event.get("project_id") != head["project_id"]:
                reason = "the event is of project %s, the checkpoint of %s" % (event.get("project_id"), head["project_id"])
                return EventVerdict(False, index, reason=reason)
            if index >= head["tree_size"]:
                reason = "leaf %d is beyond the checkpoint's tree of %d leaves: the event is newer" % (index, head["tree_size"])
                return EventVerdict(False, index, reason=reason)
            proof = self.inclusion_proof(index, head["tree_size"])
            audit.verify_leaf_inclusion(event, proof, head, trusted)
        except audit.AuditVerificationError as error:
            return EventVerdict(False, index, reason=error.reason)
        return EventVerdict(True, index, checkpoint=head, key=dict(key), proof=proof)

    def _checkpoint_holding(self, index: int) -> JsonObject:
        """The oldest checkpoint whose tree holds leaf index (the list's after is a tree size), or one issued now."""
        listed = self.checkpoints(after=index, limit=1)["data"]
        return listed[0] if listed else self.issue_checkpoint()


class EventConsumers(_Resource):
    """Named consumers of the project's event feed: the service keeps the position, so several
    workers can share one consumer and a restarted pipeline goes on where the last commit left it.
    run() is the loop to use; the other methods are its parts, for loops of your own."""

    def create(self, name: str, idempotency_key: Optional[str] = None, **fields: Any) -> JsonObject:
        """fields: types, queue, job_type, ack_wait_seconds, start ("latest" unless given,
        "earliest", {"after": cursor} or {"from_time": ...})."""
        return self._call("POST", "/event-consumers", body=dict(fields, name=name), repeat="key", idempotency_key=idempotency_key)

    def list(self) -> JsonObject:
        return self._call("GET", "/event-consumers")

    def get(self, name: str) -> JsonObject:
        """The consumer with its lag (lag_events, lag_seconds)."""
        return self._call("GET", "/event-consumers/" + _quote(name))

    def delete(self, name: str) -> None:
        return self._call("DELETE", "/event-consumers/" + _quote(name), repeat="key")

    def seek(self, name: str, after: Optional[str] = None, from_time: Optional[Instant] = None) -> JsonObject:
        """Moves the consumer after a cursor, or to the first event at or after from_time; the
        ranges polls hold are dropped."""
        if (after is None) == (from_time is None):
            raise ValueError("pass after or from_time, one of them")
        body = {"after": after} if after is not None else {"from_time": _instant(from_time)}
        return self._call("POST", "/event-consumers/%s/seek" % _quote(name), body=body, repeat="key")

    def poll(self, name: str, limit: Optional[int] = None, wait: Optional[float] = None) -> JsonObject:
        """The next events, leased to this poll for the consumer's ack_wait_seconds: {"data",
        "ack_cursor", "has_more"}; commit ack_cursor once they are handled. Never retried here: a
        poll whose answer was lost holds its range until the lease ends."""
        body = {k: v for k, v in (("limit", limit), ("wait", wait)) if v is not None}
        path = "/event-consumers/%s/poll" % _quote(name)
        return self._call("POST", path, body=body, repeat="once", timeout=(wait or 0) + self._client.timeout)

    def commit(self, name: str, ack_cursor: str) -> JsonObject:
        """Acknowledges the poll that answered ack_cursor. Committing twice is harmless, so it is
        retried after no answer or a 5xx. A range no longer out raises StaleCommitError."""
        try:
            return self._call("POST", "/event-consumers/%s/commit" % _quote(name), body={"cursor": ack_cursor})
        except JobsvcError as err:
            if err.status == 409 and err.code == "invalid_state":
                raise StaleCommitError(err.code, err.status, err.message, ack_cursor, err.request_id, err.retry_after) from err
            raise

    def run(
        self,
        name: str,
        handler: EventHandler,
        limit: int = 100,
        wait: float = 20,
        stop: Optional[threading.Event] = None,
        logger: Optional[logging.Logger] = None,
    ) -> None:
        """Polls the consumer, calls handler(events) with each non-empty batch (a list of event
        dicts), and commits the batch's ack_cursor only once the handler has returned. A handler
        that raises is logged and its batch left uncommitted: after the consumer's ack_wait_seconds
        the same events go, whole, to the next poll (this runner's or another's). One batch at a
        time; run several runners (threads, processes) on one consumer for more throughput.

        Returns once stop (a threading.Event) is set, checked between polls, so a long poll delays
        it by up to wait seconds; a batch being handled is still committed. No answer, 5xx and 429
        are waited out with back-off; a commit refused as stale (StaleCommitError) is logged and
        skipped. Any other error is raised: CursorExpiredError when retention overtook the
        consumer's position (move it with seek), event_consumer_not_found once it is deleted.

        A callback rather than a generator: a generator cannot tell a loop body that raised from
        one that broke out, and commits a batch only when the next one is asked for."""
        log = logger or logging.getLogger("jobsvc")
        failures = 0
        while stop is None or not stop.is_set():
            try:
                batch = self.poll(name, limit=limit, wait=wait)
                failures = 0
            except JobsvcError as err:
                if not err.is_transient:
                    raise
                log.warning("jobsvc event consumer %s: poll failed (%s); retrying", name, err.code)
                backoff = random.uniform(0, min(_FOLLOW_MAX_BACKOFF_SECONDS, self._client.retry_base_seconds * 2 ** failures))
                _pause(err.retry_after if err.retry_after is not None else backoff, stop)
                failures += 1
                continue
            events = batch["data"]
            # An empty answer holds no range to commit: a range with no event the filter keeps counts as committed.
            if not events:
                if not wait:
                    _pause(_IDLE_PAUSE_SECONDS, stop)
                continue
            try:
                handler(events)
            except Exception:
                log.exception(
                    "jobsvc event consumer %s: handler failed; its %d events are not committed and come back after the consumer's ack_wait_seconds",
                    name,
                    len(events),
                )
                continue
            try:
                self.commit(name, batch["ack_cursor"])
            except StaleCommitError:
                log.warning(
                    "jobsvc event consumer %s: commit refused as stale; its %d events went to another poll or a seek dropped them",
                    name,
                    len(events),
                )
            except JobsvcError as err:
                if not err.is_transient:
                    raise
                log.warning(
                    "jobsvc event consumer %s: commit failed (%s); its %d events come back after the consumer's ack_wait_seconds",
                    name,
                    err.code,
                    len(events),
                )


def _pause(seconds: float, stop: Optional[threading.Event]) -> None:
    if stop is None:
        time.sleep(seconds)
    else:
        stop.wait(seconds)
