import { STATUS_CODES } from 'node:http'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod'
import {
  AlertAlreadyExists,
  AlertNotFound,
  AlreadyRevoked,
  BillingStateBlocked,
  CannotModifyOwner,
  CannotRemoveOwner,
  DomainError,
  EmailAlreadyRegistered,
  Forbidden,
  InvalidResetToken,
  InvalidRole,
  InvalidToken,
  InviteLimitReached,
  InvalidTotpCode,
  InvalidVerificationToken,
  KeyRevoked,
  LastProject,
  MemberExists,
  MemberNotFound,
  MonthlyAllowanceExceeded,
  RoleExceedsCaller,
  SecurityNoticesRequired,
  SpendCapReached,
  TotpAlreadyEnabled,
  TotpNotEnabled,
  TotpNotInitialized,
  UserAlreadyExists,
  UserNotFound,
  InvalidState,
  WebhookAlreadyExists,
  WebhookLimitReached,
  RetryPolicyLimitReached,
  QueuePauseLimitReached,
  QueueSettingsLimitReached,
  QueueLimitsLimitReached,
  BulkLimitExceeded,
  InvalidPauseUntil,
  InvalidPriority,
  WebhookNotFound,
  EventConsumerNotFound,
  EventConsumerExists,
  EventConsumerLimitReached,
  DeliveryNotFound,
  OperationNotFound,
  WorkerNotFound,
  InvalidCronExpression,
  CronIntervalTooShort,
  RecurringLimitReached,
  InvalidRateLimitOverride,
  InvalidTimezone,
  OverageUnavailable,
  PromoCodeAlreadyExists,
  RecurringJobNotFound,
  JobNotFound,
  ParentNotFound,
  ParentTerminal,
  GraphNotCreated,
  ProjectAlreadyExists,
  ProjectNotFound,
  RecurringJobTypeConflict,
  WorkerMismatch,
} from '../../../domain/errors.ts'
import { isDatabaseUnavailable } from '../../../projections/database.ts'
import { ConcurrencyConflict, isLogUnavailable, LogBudgetExceeded, LogFull } from '../../../streams/errors.ts'
import { LoginRefused, TotpSecretUnreadable, WrongPassword } from '../../use-cases/platform/accounts.ts'
import { CursorExpired, UnknownCursor } from '../../use-cases/events/event-feed.ts'
import { HistoryExpired } from '../../use-cases/jobs/job-as-of.ts'
import { WindowFull } from '../../use-cases/platform/auth-limits.ts'
import { PasswordWorkBusy } from '../../use-cases/platform/passwords.ts'

/**
 * An error that exists only at the HTTP edge (authentication, query parsing, routing). Domain
 * refusals stay DomainErrors and get their status from the registry below. Only `edgeError`
 * makes one, so every code the edge answers is a named refusal of this file.
 */
class ApiError extends Error {
  readonly status: number
  readonly code: string
  readonly headers: Record<string, string>
  /** Fields of the envelope's `error` beside code, message and request_id (e.g. `oldest_cursor`). */
  readonly fields: Record<string, unknown>
  constructor(status: number, code: string, message: string, headers: Record<string, string>, fields: Record<string, unknown> = {}) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.code = code
    this.headers = headers
    this.fields = fields
  }
}
export type { ApiError }

/** The status and code of every refusal `edgeError` has named, for the catalogue's test. */
export const edgeErrors: Array<{ status: number; code: string }> = []

/**
 * A named refusal of the edge: one per code and status, so a code with two statuses has two.
 * `describe` gives its message, or its message and headers.
 */
function edgeError<A extends unknown[]>(
  status: number,
  code: string,
  describe: (...args: A) => string | { message: string; headers?: Record<string, string>; fields?: Record<string, unknown> },
): (...args: A) => ApiError {
  edgeErrors.push({ status, code })
  return (...args) => {
    const described = describe(...args)
    const { message, headers = {}, fields } = typeof described === 'string' ? { message: described } : described
    return new ApiError(status, code, message, headers, fields)
  }
}

const retryAfter = (retryAfterMs: number) => ({ 'Retry-After': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) })
/** A dependency outage: NATS reconnects every 250 ms and Postgres pools reconnect on the next query, so a short wait is enough. */
const outageRetryAfterSeconds = 5
/** A full log frees space only when retention removes ended jobs or the operator raises its limit: minutes, not seconds. */
const logFullRetryAfterSeconds = 60

export const unauthorized = edgeError(401, 'unauthorized', (message?: string) => message ?? 'missing or invalid API key')
export const invalidRequest = edgeError(400, 'invalid_request', (message: string) => message)
export const invalidLimit = edgeError(400, 'invalid_limit', (message: string) => message)
export const invalidCursor = edgeError(400, 'invalid_cursor', (message?: string) => message ?? 'the cursor is not one this service issued')
/** An event feed cursor from before what retention removed (services/use-cases/events/event-feed.ts). */
const cursorExpired = edgeError(410, 'cursor_expired', (err: CursorExpired) => ({
  message: err.message,
  fields: { oldest_cursor: err.oldestCursor },
}))
/** A job read as of a moment whose history retention removed (services/use-cases/jobs/job-as-of.ts). */
const historyExpired = edgeError(410, 'history_expired', (err: HistoryExpired) => err.message)
export const serviceUnavailable = edgeError(503, 'service_unavailable', (message: string, retryAfterSeconds?: number) =>
  retryAfterSeconds === undefined ? message : { message, headers: { 'Retry-After': String(retryAfterSeconds) } },
)
export const validationError = edgeError(400, 'validation_error', (message: string) => message)
export const invalidEmail = edgeError(422, 'invalid_email', (message?: string) => message ?? 'the e-mail address is malformed')
export const confirmRequired = edgeError(400, 'confirm_required', () => 'pass confirm=<the account e-mail address> to delete the account')
export const rateLimitExceeded = edgeError(429, 'rate_limit_exceeded', (retryAfterMs: number, message?: string) => ({
  message: message ?? 'too many requests; retry later',
  headers: retryAfter(retryAfterMs),
}))
export const routeNotFound = edgeError(404, 'route_not_found', (method: string, url: string) => `no route ${method} ${url}`)
export const uriTooLong = edgeError(414, 'invalid_request', (max: number) => `the request URI is over ${max} characters`)
const bodyTooLarge = edgeError(413, 'invalid_request', (message: string) => message)
const unsupportedMediaType = edgeError(415, 'invalid_request', (message: string) => message)
const requestTimeout = edgeError(408, 'invalid_request', () => 'the request was not received in time')
const headersTooLarge = edgeError(431, 'invalid_request', () => 'the request line and headers are over the size limit')
const internalError = edgeError(500, 'internal_error', () => 'internal error; safe to retry with backoff')
/** Past the project's log budget (bytes appended per hour, by plan), for appends that add work or history. */
const logBudgetExceeded = edgeError(429, 'log_budget_exceeded', (err: LogBudgetExceeded) => ({
  message: err.message,
  headers: retryAfter(err.retryAfterMs),
}))

export const invalidIdempotencyKey = edgeError(400, 'invalid_idempotency_key', () => 'Idempotency-Key must be 1 to 200 of A-Z a-z 0-9 _ -')
export const idempotencyKeyReuse = edgeError(409, 'idempotency_key_reuse', (message: string) => message)

export const invalidFrom = edgeError(400, 'invalid_from', () => 'from must be an ISO 8601 date-time')
export const invalidUntil = edgeError(400, 'invalid_until', () => 'until must be an ISO 8601 date-time')
export const invalidRange = edgeError(400, 'invalid_range', () => 'from must be before until')
export const rangeTooLarge = edgeError(400, 'range_too_large', (message?: string) => message ?? 'the window is at most 90 days')
export const invalidFormat = edgeError(400, 'invalid_format', () => 'format must be jsonl or csv')

export const displayNameTooLong = edgeError(400, 'display_name_too_long', () => 'display_name must be at most 100 characters')
export const invalidLocale = edgeError(400, 'invalid_locale', (locale: string) => `${JSON.stringify(locale)} is not a known BCP-47 locale`)

/** After the version's sunset (spec, Versioning 3); the Deprecation, Sunset and Link headers are already on the answer. */
export const versionSunset = edgeError(
  410,
  'version_sunset',
  (sunsetAt: Date) => `v1 ended at ${sunsetAt.toISOString()}; the Link header points to the migration notes`,
)
/** A compatibility route the spec lists as removed (Versioning 7): its Link names the route to call instead. */
export const routeRemoved = edgeError(410, 'route_removed', (method: string, canonicalPath: string) => ({
  message: `this compatibility route was removed; call ${method} ${canonicalPath}`,
  headers: { Link: `<${canonicalPath}>; rel="canonical"` },
}))

export const billingDisabled = edgeError(503, 'billing_disabled', () => 'billing is not configured on this installation')
export const missingSignature = edgeError(400, 'missing_signature', (header: string) => `the ${header} header is missing`)
export const invalidSignature = edgeError(400, 'invalid_signature', () => 'the signature does not verify or its timestamp is outside 5 minutes')

const invalidCredentials = edgeError(401, 'invalid_credentials', (message: string) => message)
/** At login a wrong second factor is 401; on the 2FA routes it is the domain's InvalidTotpCode, 400. */
const invalidTotpCodeAtLogin = edgeError(401, 'invalid_totp_code', () => 'the two-factor code is wrong or was already used')
const emailNotVerified = edgeError(403, 'email_not_verified', () => 'verify your e-mail address first')
const totpRequired = edgeError(403, 'totp_required', () => 'two-factor authentication is on: send totp_code or recovery_code')
const accountSuspended = edgeError(403, 'account_suspended', () => 'this account is suspended')
const accountLocked = edgeError(429, 'account_locked', (retryAfterMs: number) => ({
  message: 'too many failed logins; try again later',
  headers: retryAfter(retryAfterMs),
}))
/**
 * 409, not 500: the sealed TOTP secret cannot be read with this installation's JOBSVC_SECRET.
 * Retrying does not help; restoring the secret it was sealed under does (recovery codes, which
 * are digests, still log in meanwhile), and a pending secret is replaced by setting up again.
 */
const totpSecretUnreadable = edgeError(
  409,
  'totp_secret_unreadable',
  (pending: boolean) =>
    `the two-factor secret cannot be read on this installation (its JOBSVC_SECRET changed); ${pending ? 'call 2fa/setup again for a new secret' : 'log in with a recovery code, or ask the operator to restore the secret'}`,
)

const loginRefusals: Record<LoginRefused['reason'], (err: LoginRefused) => ApiError> = {
  invalid_credentials: () => invalidCredentials('wrong e-mail or password'),
  invalid_totp_code: () => invalidTotpCodeAtLogin(),
  email_not_verified: () => emailNotVerified(),
  totp_required: () => totpRequired(),
  account_suspended: () => accountSuspended(),
  account_locked: (err) => accountLocked(err.retryAfterMs),
}

/**
 * The use cases' refusals that are not the domain's: a login's, a wrong current password, an
 * unreadable TOTP secret, a full window of the auth limits, no room for another scrypt run in
 * this process, an event feed cursor, a job's history that retention removed.
 */
function useCaseRefusal(err: unknown): ApiError | null {
  if (err instanceof LoginRefused) return loginRefusals[err.reason](err)
  if (err instanceof PasswordWorkBusy) return rateLimitExceeded(err.retryAfterMs, `${err.message}; retry in a second`)
  if (err instanceof WrongPassword) return invalidCredentials('the password is wrong')
  if (err instanceof TotpSecretUnreadable) return totpSecretUnreadable(err.pending)
  if (err instanceof WindowFull) return rateLimitExceeded(err.retryAfterMs, err.message)
  if (err instanceof CursorExpired) return cursorExpired(err)
  if (err instanceof UnknownCursor) return invalidCursor(err.message)
  if (err instanceof HistoryExpired) return historyExpired(err)
  return null
}

type DomainErrorClass = abstract new (...args: never[]) => DomainError

/** Domain refusal → HTTP status; the code comes from the error itself. */
const domainStatuses: ReadonlyArray<readonly [DomainErrorClass, number]> = [
  [JobNotFound, 404],
  [ProjectNotFound, 404],
  [InvalidState, 409],
  [WorkerMismatch, 409],
  [ParentTerminal, 409],
  [GraphNotCreated, 424],
  [RecurringJobTypeConflict, 409],
  [ProjectAlreadyExists, 409],
  [ParentNotFound, 422],
  [EmailAlreadyRegistered, 409],
  [InvalidVerificationToken, 400],
  [InvalidResetToken, 400],
  [InvalidToken, 422],
  [UserNotFound, 404],
  [UserAlreadyExists, 409],
  [TotpAlreadyEnabled, 409],
  [TotpNotEnabled, 409],
  [TotpNotInitialized, 400],
  // At login a wrong second factor is 401 (a LoginRefused, below).
  [InvalidTotpCode, 400],
  [KeyRevoked, 409],
  [AlreadyRevoked, 409],
  [LastProject, 409],
  [MemberNotFound, 404],
  [MemberExists, 409],
  [CannotModifyOwner, 403],
  [CannotRemoveOwner, 403],
  [RoleExceedsCaller, 403],
  [InvalidRole, 422],
  [Forbidden, 403],
  [OverageUnavailable, 409],
  [RecurringJobNotFound, 404],
  [AlertNotFound, 404],
  [AlertAlreadyExists, 409],
  [WebhookNotFound, 404],
  [EventConsumerNotFound, 404],
  [DeliveryNotFound, 404],
  [OperationNotFound, 404],
  [WorkerNotFound, 404],
  [EventConsumerExists, 409],
  [EventConsumerLimitReached, 409],
  [WebhookAlreadyExists, 409],
  [WebhookLimitReached, 409],
  [InviteLimitReached, 409],
  [RetryPolicyLimitReached, 409],
  [QueuePauseLimitReached, 409],
  [QueueSettingsLimitReached, 409],
  [QueueLimitsLimitReached, 409],
  [BulkLimitExceeded, 409],
  [InvalidPauseUntil, 400],
  [InvalidPriority, 400],
  [PromoCodeAlreadyExists, 409],
  [InvalidRateLimitOverride, 400],
  [InvalidCronExpression, 400],
  [CronIntervalTooShort, 400],
  [RecurringLimitReached, 409],
  [InvalidTimezone, 400],
  [SecurityNoticesRequired, 400],
  [BillingStateBlocked, 402],
  [MonthlyAllowanceExceeded, 429],
  [SpendCapReached, 429],
]

/**
 * Every code this API can answer, with its status: the README's error reference lists the same
 * (a test compares them).
 */
export const errorCatalogue: ReadonlyArray<{ status: number; code: string }> = [
  { status: 400, code: 'invalid_request' },
  { status: 400, code: 'invalid_limit' },
  { status: 400, code: 'invalid_cursor' },
  { status: 400, code: 'validation_error' },
  { status: 400, code: 'invalid_idempotency_key' },
  { status: 400, code: 'invalid_from' },
  { status: 400, code: 'invalid_until' },
  { status: 400, code: 'invalid_range' },
  { status: 400, code: 'range_too_large' },
  { status: 400, code: 'invalid_format' },
  { status: 400, code: 'invalid_verification_token' },
  { status: 400, code: 'invalid_reset_token' },
  { status: 400, code: 'invalid_totp_code' },
  { status: 400, code: 'totp_not_initialized' },
  { status: 400, code: 'display_name_too_long' },
  { status: 400, code: 'invalid_timezone' },
  { status: 400, code: 'invalid_cron_expression' },
  { status: 400, code: 'cron_interval_too_short' },
  { status: 400, code: 'invalid_locale' },
  { status: 400, code: 'security_notices_required' },
  { status: 400, code: 'confirm_required' },
  { status: 400, code: 'missing_signature' },
  { status: 400, code: 'invalid_signature' },
  { status: 401, code: 'unauthorized' },
  { status: 402, code: 'billing_state_blocked' },
  { status: 401, code: 'invalid_credentials' },
  { status: 401, code: 'invalid_totp_code' },
  { status: 403, code: 'forbidden' },
  { status: 403, code: 'email_not_verified' },
  { status: 403, code: 'totp_required' },
  { status: 403, code: 'account_suspended' },
  { status: 403, code: 'cannot_modify_owner' },
  { status: 403, code: 'cannot_remove_owner' },
  { status: 403, code: 'role_exceeds_caller' },
  { status: 404, code: 'job_not_found' },
  { status: 404, code: 'project_not_found' },
  { status: 404, code: 'user_not_found' },
  { status: 404, code: 'member_not_found' },
  { status: 404, code: 'recurring_job_not_found' },
  { status: 404, code: 'alert_not_found' },
  { status: 404, code: 'webhook_not_found' },
  { status: 404, code: 'event_consumer_not_found' },
  { status: 404, code: 'delivery_not_found' },
  { status: 404, code: 'operation_not_found' },
  { status: 404, code: 'worker_not_found' },
  { status: 404, code: 'route_not_found' },
  { status: 409, code: 'invalid_state' },
  { status: 409, code: 'email_already_registered' },
  { status: 409, code: 'idempotency_key_reuse' },
  { status: 409, code: 'totp_already_enabled' },
  { status: 409, code: 'totp_not_enabled' },
  { status: 409, code: 'totp_secret_unreadable' },
  { status: 409, code: 'key_revoked' },
  { status: 409, code: 'already_revoked' },
  { status: 409, code: 'last_project' },
  { status: 409, code: 'member_exists' },
  { status: 409, code: 'overage_unavailable' },
  { status: 409, code: 'worker_mismatch' },
  { status: 409, code: 'parent_terminal' },
  { status: 409, code: 'recurring_job_type_conflict' },
  { status: 409, code: 'recurring_limit_reached' },
  { status: 409, code: 'webhook_limit_reached' },
  { status: 409, code: 'event_consumer_exists' },
  { status: 409, code: 'event_consumer_limit_reached' },
  { status: 409, code: 'invite_limit_reached' },
  { status: 409, code: 'retry_policy_limit_reached' },
  { status: 409, code: 'queue_pause_limit_reached' },
  { status: 409, code: 'queue_settings_limit_reached' },
  { status: 409, code: 'queue_limits_limit_reached' },
  { status: 409, code: 'bulk_limit_exceeded' },
  { status: 410, code: 'version_sunset' },
  { status: 410, code: 'route_removed' },
  { status: 410, code: 'cursor_expired' },
  { status: 410, code: 'history_expired' },
  { status: 408, code: 'invalid_request' },
  { status: 413, code: 'invalid_request' },
  { status: 414, code: 'invalid_request' },
  { status: 415, code: 'invalid_request' },
  { status: 431, code: 'invalid_request' },
  { status: 422, code: 'parent_not_found' },
  { status: 424, code: 'graph_not_created' },
  { status: 422, code: 'invalid_email' },
  { status: 422, code: 'invalid_role' },
  { status: 422, code: 'invalid_token' },
  { status: 429, code: 'rate_limit_exceeded' },
  { status: 429, code: 'account_locked' },
  { status: 429, code: 'monthly_allowance_exceeded' },
  { status: 429, code: 'spend_cap_reached' },
  { status: 429, code: 'log_budget_exceeded' },
  { status: 500, code: 'internal_error' },
  { status: 503, code: 'service_unavailable' },
  { status: 503, code: 'billing_disabled' },
]

interface Rendered {
  status: number
  code: string
  message: string
  headers?: Record<string, string>
  fields?: Record<string, unknown>
}

/** Fastify's own errors for bodies it could not read, by its error code. */
const fastifyBodyErrors: Record<string, (message: string) => ApiError> = {
  FST_ERR_CTP_INVALID_JSON_BODY: invalidRequest,
  FST_ERR_CTP_EMPTY_JSON_BODY: invalidRequest,
  FST_ERR_CTP_BODY_TOO_LARGE: bodyTooLarge,
  FST_ERR_CTP_INVALID_MEDIA_TYPE: unsupportedMediaType,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: invalidRequest,
  FST_ERR_CTP_INVALID_TYPE: invalidRequest,
}

/** Names the first failure as `body.field: message` (the spec: validation stops at the first). */
function describeValidation(err: FastifyError): string {
  if (hasZodFastifySchemaValidationErrors(err)) {
    const first = err.validation[0]!
    const path = first.instancePath.split('/').filter(Boolean)
    return `${[err.validationContext, ...path].filter(Boolean).join('.')}: ${first.message}`
  }
  return err.message
}

/**
 * Anything thrown as a registered refusal: the edge's own, the use cases', a domain refusal with
 * its registered status, an outage, or one of Fastify's request errors; null for anything else.
 */
function toRefusal(err: unknown): Rendered | null {
  if (err instanceof ApiError) return err
  if (err instanceof DomainError) {
    const status = domainStatuses.find(([cls]) => err instanceof cls)?.[1]
    return status === undefined ? null : { status, code: err.code, message: err.message }
  }
  const refused = useCaseRefusal(err)
  if (refused !== null) return refused
  if (err instanceof LogBudgetExceeded) return logBudgetExceeded(err)
  if (err instanceof LogFull) return serviceUnavailable(`${err.message}; retry later`, logFullRetryAfterSeconds)
  if (isLogUnavailable(err)) return serviceUnavailable('the event log (NATS) is unavailable; retry with backoff', outageRetryAfterSeconds)
  if (isDatabaseUnavailable(err)) return serviceUnavailable('the database (Postgres) is unavailable; retry with backoff', outageRetryAfterSeconds)
  if (err instanceof ConcurrencyConflict) return toRefusal(new InvalidState('the job changed concurrently; read it again and retry'))
  const fe = err as FastifyError
  if (fe && typeof fe === 'object' && fe.validation) return invalidRequest(describeValidation(fe))
  if (fe && typeof fe.code === 'string' && fe.code in fastifyBodyErrors) return fastifyBodyErrors[fe.code]!(fe.message)
  return null
}

/**
 * Maps anything thrown to the envelope's status, code and message. An error nothing registers
 * (a DomainError left out of `domainStatuses` included) is a 500 whose message is hidden; the
 * caller logs it.
 */
export function renderError(err: unknown): Rendered {
  const refusal = toRefusal(err)
  if (refusal !== null) {
    return { status: refusal.status, code: refusal.code, message: refusal.message, headers: refusal.headers, fields: refusal.fields }
  }
  const fe = err as FastifyError
  // Fastify's other client errors (a malformed URL, an over-long parameter) keep their status.
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return { status: fe.statusCode, code: 'invalid_request', message: fe.message }
  }
  const internal = internalError()
  return { status: internal.status, code: internal.code, message: internal.message }
}

function logServerSide(request: FastifyRequest, rendered: Rendered, err: unknown, what: string): void {
  if (rendered.status === 503) request.log.warn({ err, request_id: request.id, route: request.url }, `${what} refused: a dependency is unavailable`)
  else if (rendered.status >= 500) request.log.error({ err, request_id: request.id, route: request.url }, `${what} failed`)
}

export function sendError(request: FastifyRequest, reply: FastifyReply, err: unknown): FastifyReply {
  const rendered = renderError(err)
  logServerSide(request, rendered, err, 'request')
  for (const [name, value] of Object.entries(rendered.headers ?? {})) {
    // Link is a list (RFC 8288): a refusal's own link joins the version's deprecation links instead of replacing them.
    const earlier = name === 'Link' ? reply.getHeader('link') : undefined
    void reply.header(name, earlier === undefined ? value : `${String(earlier)}, ${value}`)
  }
  // Framework errors (a malformed URL, an over-long path parameter) skip the onRequest hooks.
  void reply.header('X-Request-Id', request.id)
  return reply
    .code(rendered.status)
    .type('application/json; charset=utf-8')
    .send({ error: { code: rendered.code, message: rendered.message, request_id: request.id, ...rendered.fields } })
}

/** What one item of a batch answer says when it failed: its status and the envelope's error object. */
export interface ItemFailure {
  status: number
  error: { code: string; message: string; request_id: string }
}

/** Batches that have logged a failed item: an outage fails every item alike, and one line says so. */
const batchesLogged = new WeakSet<FastifyRequest>()

/**
 * One item of a batch, refused or failed on its own while the request as a whole succeeded: the
 * status and error object the item would have had as a request of its own, rendered as
 * `sendError` does; the first server-side failure of a batch is logged. Headers such as
 * `Retry-After` belong to a whole answer and are dropped.
 */
export function itemFailure(request: FastifyRequest, err: unknown): ItemFailure {
  const rendered = renderError(err)
  if (rendered.status >= 500 && !batchesLogged.has(request)) {
    batchesLogged.add(request)
    logServerSide(request, rendered, err, 'batch item (the first of this batch; later ones are not logged)')
  }
  return { status: rendered.status, error: { code: rendered.code, message: rendered.message, request_id: request.id } }
}

/**
 * Node's HTTP parser refuses some requests before Fastify makes a request of them: an unknown
 * method or malformed request line (400), request line and headers over the size limit (431), a
 * request not received in time (408). Their answer is written to the socket here, in the
 * envelope and with a request id like every other answer; the connection is closed after it, as
 * Node does, since the parser cannot find the next request on it.
 */
export function rawClientErrorResponse(err: { code?: string }, requestId: string): string {
  const { status, code, message } =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? headersTooLarge()
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? requestTimeout()
        : invalidRequest(err.code === 'HPE_INVALID_METHOD' ? 'unknown HTTP method' : 'malformed HTTP request')
  const body = JSON.stringify({ error: { code, message, request_id: requestId } })
  return [
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    `X-Request-Id: ${requestId}`,
    'Connection: close',
    '',
    body,
  ].join('\r\n')
}

/** The one error handler and the one not-found handler of the app. */
export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => sendError(request, reply, err))
  app.setNotFoundHandler((request, reply) => sendError(request, reply, routeNotFound(request.method, request.url.split('?')[0]!)))
}
