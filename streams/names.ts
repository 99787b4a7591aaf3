/**
 * Every stream, consumer, bucket and subject name: the install's, built from its namespace, and
 * the JetStream API and reply subjects it sends to. No other file concatenates or splits
 * subjects: a namespace change or a new aggregate kind is made here.
 */

/** Each kind's command handler, its decider and how it is addressed, is in streams/aggregates.ts. */
export type AggregateKind =
  | 'job'
  | 'progress'
  | 'project'
  | 'recurring'
  | 'user'
  | 'email'
  | 'alert'
  | 'webhook'
  | 'delivery'
  | 'promo'
  /** A project's named reader of its event feed (domain/event-consumer.ts), keyed by its name. */
  | 'consumer'
  /** A long-running action of a project (a webhook replay; later bulk job actions), domain/operation.ts. */
  | 'operation'
  /** A project's signed checkpoints of its Merkle log (domain/audit-checkpoint.ts), keyed by the project's id. */
  | 'audit'
  /** A key that signs audit checkpoints (domain/audit-signing-key.ts), of the platform, keyed by its key id. */
  | 'audit_key'
  /** The leaves of a project's Merkle log whose messages retention removed (domain/audit-expiry.ts), keyed by the project's id. */
  | 'audit_expiry'
  /** A deduplication key of a project's jobs (domain/dedup-key.ts), keyed by a digest of its scope and key. */
  | 'dedup'
  /** A flow gate of a project's queue or key (domain/flow-gate.ts), keyed by a digest of its name. */
  | 'gate'

/**
 * The project token of aggregates that belong to no project (users, e-mail claims, promotion codes). Project
 * ids start with `prj_`, so this cannot collide with one.
 */
export const platformScope = '_platform'

const namespacePattern = /^[A-Za-z0-9_-]{1,64}$/
const tokenPattern = /^[A-Za-z0-9_-]+$/

/** True when `ns` can prefix stream names (no dots) and subjects. */
export function isValidNamespace(ns: string): boolean {
  return namespacePattern.test(ns)
}

/** True when `id` is safe as one subject token (ids of jobs, projects and recurring jobs are). */
export function isSubjectToken(id: string): boolean {
  return tokenPattern.test(id)
}

function token(id: string): string {
  if (!isSubjectToken(id)) throw new Error(`not a valid subject token: ${JSON.stringify(id)}`)
  return id
}

export function eventsStreamName(ns: string): string {
  return `${ns}_events`
}

export function eventsSubjectFilter(ns: string): string {
  return `${ns}.evt.>`
}

/** `<ns>.evt.<project_id>.<aggregate>.<aggregate_id>`, the contract of CONTRACT.md. */
export function eventSubject(ns: string, projectId: string, aggregate: AggregateKind, aggregateId: string): string {
  return `${ns}.evt.${token(projectId)}.${aggregate}.${token(aggregateId)}`
}

/** Matches every aggregate of one kind in every project, e.g. `<ns>.evt.*.job.*`. */
export function aggregateKindFilter(ns: string, aggregate: AggregateKind): string {
  return `${ns}.evt.*.${aggregate}.*`
}

/** Every subject of one project's aggregates: `<ns>.evt.<project>.>`. */
export function projectSubjectsFilter(ns: string, projectId: string): string {
  return `${ns}.evt.${token(projectId)}.>`
}

/** Every subject of one kind of aggregate of one project: `<ns>.evt.<project>.<aggregate>.*`. */
export function projectKindFilter(ns: string, projectId: string, aggregate: AggregateKind): string {
  return `${ns}.evt.${token(projectId)}.${aggregate}.*`
}

/**
 * Every subject of one job: its own (`job`) and its progress reports' (`progress`, keyed by the
 * job's id), `<ns>.evt.<project>.*.<job_id>`. No other aggregate has a job's id.
 */
export function jobSubjectsFilter(ns: string, projectId: string, jobId: string): string {
  return `${ns}.evt.${token(projectId)}.*.${token(jobId)}`
}

/**
 * A test of subjects against a subject filter as JetStream applies it (`*` one token, `>` one or
 * more at the end): what a reader of the unfiltered log keeps (streams/narrowing-scan.ts).
 */
export function subjectMatcher(filter: string): (subject: string) => boolean {
  const wanted = filter.split('.')
  const rest = wanted[wanted.length - 1] === '>'
  const fixed = rest ? wanted.length - 1 : wanted.length
  return (subject) => {
    const tokens = subject.split('.')
    if (rest ? tokens.length <= fixed : tokens.length !== fixed) return false
    for (let i = 0; i < fixed; i++) if (wanted[i] !== '*' && wanted[i] !== tokens[i]) return false
    return true
  }
}

/** Splits an event subject back into its parts; null for any other subject. */
export function parseEventSubject(ns: string, subject: string): { projectId: string; aggregate: AggregateKind; aggregateId: string } | null {
  const parts = subject.split('.')
  if (parts.length !== 5 || parts[0] !== ns || parts[1] !== 'evt') return null
  return { projectId: parts[2]!, aggregate: parts[3] as AggregateKind, aggregateId: parts[4]! }
}

/** The projector announces each committed checkpoint here, for read-your-writes waits and the ready index. */
export function checkpointSubject(ns: string): string {
  return `${ns}.ctl.checkpoint`
}

/** A replay asks the leading projector to step down here. */
export function projectorYieldSubject(ns: string): string {
  return `${ns}.ctl.projector.yield`
}

/** Sliding windows of the anonymous auth routes and login failures, shared by every API process. */
export function authLimitsBucketName(ns: string): string {
  return `${ns}_auth_limits`
}

/** Idempotency keys of state-changing requests (24-hour TTL). */
export function idempotencyBucketName(ns: string): string {
  return `${ns}_idempotency`
}

export function heartbeatBucketName(ns: string): string {
  return `${ns}_heartbeats`
}

/** The stream JetStream keeps a key-value bucket in (`KV_<bucket>`). */
export function keyValueStreamName(bucket: string): string {
  return `KV_${bucket}`
}

/** Work queue of webhook deliveries: one message per (event, subscription), acked when settled. */
export function deliveriesStreamName(ns: string): string {
  return `${ns}_deliveries`
}

export function deliverySubject(ns: string, projectId: string, webhookId: string): string {
  return `${ns}.dlv.${token(projectId)}.${token(webhookId)}`
}

export function deliveriesSubjectFilter(ns: string): string {
  return `${ns}.dlv.>`
}

/** Splits a delivery subject back into its project and subscription; null for any other subject. */
export function parseDeliverySubject(ns: string, subject: string): { projectId: string; webhookId: string } | null {
  const parts = subject.split('.')
  if (parts.length !== 4 || parts[0] !== ns || parts[1] !== 'dlv' || !isSubjectToken(parts[2]!) || !isSubjectToken(parts[3]!)) return null
  return { projectId: parts[2]!, webhookId: parts[3]! }
}

/**
 * Plain-NATS wake-up for deliverers, a delivery subject as payload: the fan-out queued work for
 * that subscription, so a deliverer not yet pulling from its consumer starts now rather than at
 * its next sweep.
 */
export function deliveriesWakeSubject(ns: string): string {
  return `${ns}.ctl.deliveries`
}

/** Work queue of alert e-mails: one message per (alert event, address), acked once sent. */
export function mailStreamName(ns: string): string {
  return `${ns}_mail`
}

export function alertMailSubject(ns: string, projectId: string): string {
  return `${ns}.mail.alert.${token(projectId)}`
}

export function mailSubjectFilter(ns: string): string {
  return `${ns}.mail.>`
}

export function mailerConsumerName(ns: string): string {
  return `${ns}_mailer`
}

/** The dispatcher's durable consumer of job events (headers only, streams/consume.ts). */
export function dispatcherConsumerName(ns: string): string {
  return `${ns}_dispatcher_jobs`
}

/**
 * The durable the dispatchers of versions before headers-only reading consumed job events with
 * (whole messages). Left to them while they run: the new durable starts where it stood, and the
 * server removes it once none pulls from it.
 */
export function formerDispatcherConsumerName(ns: string): string {
  return `${ns}_dispatcher`
}

/** The dispatcher's durable consumer of the projects' audit checkpoints (`audit.checkpoint` webhooks). */
export function auditDispatcherConsumerName(ns: string): string {
  return `${ns}_dispatcher_audit`
}

/** The dispatcher's durable consumer of project events (`queue.paused` and `queue.resumed` webhooks). */
export function projectDispatcherConsumerName(ns: string): string {
  return `${ns}_dispatcher_projects`
}

/** The dispatcher's durable consumer of alert events (webhooks and e-mails of alerts). */
export function alertDispatcherConsumerName(ns: string): string {
  return `${ns}_dispatcher_alerts`
}

/**
 * The one consumer of the whole deliveries queue that earlier versions used. A work-queue stream
 * refuses a consumer whose filter overlaps another's, so deliverers delete it at start.
 */
export function delivererConsumerName(ns: string): string {
  return `${ns}_deliverer`
}

/** One subscription's durable consumer of the deliveries work queue, filtered on its `deliverySubject`. */
export function subscriptionDelivererConsumerName(ns: string, projectId: string, webhookId: string): string {
  return `${ns}_deliverer_${token(projectId)}_${token(webhookId)}`
}

export function projectorConsumerName(ns: string): string {
  return `${ns}_projector`
}

/** JetStream API: one message of `stream` by sequence, answered by any replica (the stream allows direct gets). */
export function directGetApiSubject(stream: string): string {
  return `$JS.API.DIRECT.GET.${stream}`
}

/**
 * JetStream API: one message of `stream` (by sequence, the last on a subject, the next on a
 * subject from a sequence), answered by the stream's leader: what it says is as new as the log.
 */
export function messageGetApiSubject(stream: string): string {
  return `$JS.API.STREAM.MSG.GET.${stream}`
}

/** JetStream API: creates an ephemeral consumer of `stream` (the server names it). */
export function consumerCreateApiSubject(stream: string): string {
  return `$JS.API.CONSUMER.CREATE.${stream}`
}

/** JetStream API: deletes the consumer `name` of `stream`. */
export function consumerDeleteApiSubject(stream: string, name: string): string {
  return `$JS.API.CONSUMER.DELETE.${stream}.${name}`
}

/** JetStream API: a pull request to the consumer `name` of `stream`. */
export function consumerNextApiSubject(stream: string, name: string): string {
  return `$JS.API.CONSUMER.MSG.NEXT.${stream}.${name}`
}

/** JetStream API: deletes one message of `stream` by sequence. */
export function messageDeleteApiSubject(stream: string): string {
  return `$JS.API.STREAM.MSG.DELETE.${stream}`
}

/** JetStream API: purges `stream`, or the messages of one subject below a sequence. */
export function streamPurgeApiSubject(stream: string): string {
  return `$JS.API.STREAM.PURGE.${stream}`
}

/** The reply subject of one request sent from `inbox`: `<inbox>.<token>`, the token matching it to its answer. */
export function replySubject(inbox: string, token: string): string {
  return `${inbox}.${token}`
}

/** Matches every reply subject of `inbox`. */
export function replySubjectsFilter(inbox: string): string {
  return `${inbox}.*`
}

/** The token of a reply subject of `inbox`; null for any other subject. */
export function parseReplySubject(inbox: string, subject: string): string | null {
  return subject.startsWith(`${inbox}.`) ? subject.slice(inbox.length + 1) : null
}
