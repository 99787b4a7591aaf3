import type { Actor } from '../../../domain/decider.ts'
import {
  BillingStateBlocked,
  DomainError,
  GraphNotCreated,
  InvalidState,
  JobNotFound,
  MonthlyAllowanceExceeded,
  ParentNotFound,
  ParentTerminal,
  SpendCapReached,
} from '../../../domain/errors.ts'
import type { GraphPlan } from '../../../domain/job-graph.ts'
import type { Job, ParentFailureRule } from '../../../domain/job.ts'
import { jobDefaults } from '../../../domain/job-options.ts'
import { billingOf, defaultTtlOf, type Project } from '../../../domain/project/index.ts'
import { retryPolicyFor, type RetryPolicies } from '../../../domain/retry-policy.ts'
import type { AllowanceRefusal, Grant, QuotaReading, QuotaTerms } from '../metering/allowance.ts'
import { allowanceMarksOf, type BillingService } from '../metering/billing-service.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { JobService, NewJob } from './job-service.ts'
import { admitDebounce, admitDedup, debounceKeyRef, dedupKeyRef, releaseDedup, type DebounceOption, type DedupOption } from './dedup.ts'
import { runSerialPerKey } from './serial-per-key.ts'

/** A job as a client asks for it (the single create's validated body); options left out take the defaults. */
export interface JobRequest {
  job_type: string
  payload: Record<string, unknown>
  queue?: string | null | undefined
  run_at?: string | null | undefined
  max_attempts?: number | null | undefined
  timeout_seconds?: number | null | undefined
  tags?: Record<string, string> | null | undefined
  parent_job_id?: string | null | undefined
  idempotency_key?: string | null | undefined
  priority?: number | null | undefined
  /** Extension (issue 28): absent or null, the queue's default ttl if it has one. */
  ttl_seconds?: number | null | undefined
  /** Extension (issue 29): at most one job per key under its rule; a duplicate answers the existing job (dedup.ts). */
  dedup?: DedupOption | null | undefined
  /** Extension (issue 29): runs once, with the last payload, after a quiet period (dedup.ts, `admitDebounce`). */
  debounce?: DebounceOption | null | undefined
  /** Extension (issue 29): the key per-key limits may count the job by. */
  concurrency_key?: string | null | undefined
  /** Extension (issue 30): the job's parents; it runs once each has succeeded. */
  depends_on?: string[] | null | undefined
  /** Extension (issue 30): with `depends_on`, what a parent's dead-letter or cancel does to it. */
  on_parent_failure?: ParentFailureRule | null | undefined
}

export interface CreationItem {
  request: JobRequest
  /** An id the caller decided (a recurring occurrence's); its job existing already is InvalidState. */
  jobId?: string
  /** The request's W3C `traceparent` header as sent (the recurring scheduler has none). */
  traceparent?: string | null
  /** The dashboard member creating it through their session; none for an API key or the scheduler. */
  actor?: Actor
}

/**
 * One item's outcome: its job, or why it was not created (a DomainError, or an outage).
 * `deduplicated`: no job was created; `job` is the one already holding the item's dedup key.
 */
export type CreationResult = { ok: true; job: Job; seq: number; deduplicated?: true } | { ok: false; error: unknown }

/** Whether the item made a new job (and so spent its unit of the allowance). */
export function isCreated(result: CreationResult): boolean {
  return result.ok && result.deduplicated !== true
}

export interface Creation {
  /** In the order of the items. */
  results: CreationResult[]
  /** The allowance before this request's first unit (after its refusal when it got none); null when nothing was metered. */
  reading: QuotaReading | null
}

/** What creating needs: the runtime, the job aggregate's use cases, and billing (terms, allowance, warnings). */
export interface CreationPorts {
  deps: Deps
  jobs: JobService
  billing: BillingService
}

/**
 * Appends one batch keeps in flight at once: enough to keep the publisher's pipeline full (the
 * machine does about 35k pipelined publishes/s against 8k awaited one by one), few enough that one
 * batch of 1,000 does not queue its whole burst ahead of every other request.
 */
const appendsInFlight = 64

/**
 * `max_attempts` left out is the one of the retry policy of the job's queue in its project;
 * `ttl_seconds` left out, the queue's default ttl (`queueTtl`), if it has one.
 */
export function toNewJob(
  request: JobRequest,
  retryPolicies: RetryPolicies | undefined,
  traceparent: string | null = null,
  queueTtl: (queue: string) => number | null = () => null,
): NewJob {
  const queue = request.queue ?? jobDefaults.queue
  return {
    job_type: request.job_type,
    payload: request.payload,
    queue,
    run_at: request.run_at ?? null,
    max_attempts: request.max_attempts ?? retryPolicyFor(retryPolicies, queue).max_attempts,
    timeout_seconds: request.timeout_seconds ?? jobDefaults.timeout_seconds,
    tags: request.tags ?? null,
    parent_job_id: request.parent_job_id ?? null,
    idempotency_key: request.idempotency_key ?? null,
    traceparent,
    ...(request.priority === undefined || request.priority === null ? {} : { priority: request.priority }),
    ttl_seconds: request.ttl_seconds ?? queueTtl(queue),
    ...(request.concurrency_key === undefined || request.concurrency_key === null ? {} : { concurrency_key: request.concurrency_key }),
    ...(request.depends_on === undefined || request.depends_on === null ? {} : { depends_on: request.depends_on }),
    // A graph batch's item may name its parents by ref only (createGraph adds them to depends_on).
    ...(request.on_parent_failure === undefined || request.on_parent_failure === null ? {} : { on_parent_failure: request.on_parent_failure }),
  }
}

function refusalError(refusal: AllowanceRefusal): SpendCapReached | MonthlyAllowanceExceeded {
  return refusal === 'spend_cap_reached'
    ? new SpendCapReached('the spend cap is reached')
    : new MonthlyAllowanceExceeded("this period's job allowance is used up")
}

/**
 * Job creation, for every way a job comes to exist: the single create, the batch create and the
 * recurring scheduler. The billing state must be active (BillingStateBlocked for the whole
 * request otherwise); each item takes a unit of the monthly allowance first, all of them in one
 * request to the counter, so the allowance is never exceeded; items past what the terms allow
 * are refused (MonthlyAllowanceExceeded or SpendCapReached), the earlier ones created. Jobs are
 * appended in parallel (at most `appendsInFlight`; continuations of one parent one after
 * another, since each is attached to that parent first), and a unit whose job was not created
 * goes back. A created job whose count reaches 80 % or 100 % of the allowance records the warning.
 *
 * An item's failure (a missing or ended parent, an outage) is its result, never the request's:
 * the jobs created beside it stand.
 */
export async function createJobs(ports: CreationPorts, project: Project, items: readonly CreationItem[]): Promise<Creation> {
  const { deps, billing } = ports
  const billingState = billingOf(project).state
  if (billingState !== 'active') throw new BillingStateBlocked(`the project's billing state is ${billingState}; job reads still work`)
  if (items.length === 0) return { results: [], reading: null }
  const terms = billing.termsOf(project)
  const grant = deps.config.tunables.metering_enabled ? await billing.allowance.take(project.id, terms, deps.now(), items.length) : null
  const admitted = grant === null ? items.length : grant.units.length
  const results = new Array<CreationResult>(items.length)
  for (let i = admitted; i < items.length; i++) results[i] = { ok: false, error: refusalError(grant!.refusal!) }
  // Items of one batch with the same dedup key go one after another too, so the first in the
  // batch's order is the one that creates.
  const aggregateKeys = items.slice(0, admitted).map(({ request }) => {
    const queue = request.queue ?? jobDefaults.queue
    if (request.parent_job_id != null) return request.parent_job_id
    if (request.dedup != null) return dedupKeyRef(project.id, request.dedup, queue).id
    if (request.debounce != null) return debounceKeyRef(project.id, request.debounce, queue).id
    return null
  })
  await runSerialPerKey(aggregateKeys, appendsInFlight, async (i) => {
    const item = items[i]!
    try {
      results[i] = await createOne(ports, project, item)
    } catch (err) {
      results[i] = { ok: false, error: err }
    }
  })
  if (grant !== null) await settleUnits(ports, project, terms, grant, results)
  return { results, reading: grant?.reading ?? null }
}

/**
 * A graph batch (issue 30, domain/job-graph.ts): every job of the graph is created, or none is.
 * Before any append: the billing state, the allowance for all of its jobs at once (a partial
 * grant is given back whole), and every parent outside the batch (it must exist, and under
 * `cancel` must not have ended without success). Then the jobs are created leaves first, each
 * naming its children of the batch on its own `job_created` and waiting for its parents of the
 * batch, which do not exist yet: until the roots (created last) exist no job of the graph can
 * run, and a failure on the way cancels what was created (none of it ran) and gives every unit
 * back. Each item then answers its own error, or GraphNotCreated naming the item that failed.
 */
export async function createGraph(ports: CreationPorts, project: Project, items: readonly CreationItem[], plan: GraphPlan): Promise<Creation> {
  const { deps, billing, jobs } = ports
  const billingState = billingOf(project).state
  if (billingState !== 'active') throw new BillingStateBlocked(`the project's billing state is ${billingState}; job reads still work`)
  const refuseAll = (failed: number, error: unknown): CreationResult[] =>
    items.map((_, i) => ({ ok: false, error: i === failed ? error : new GraphNotCreated(failed, errorCodeOf(error)) }))
  const terms = billing.termsOf(project)
  const grant = deps.config.tunables.metering_enabled ? await billing.allowance.take(project.id, terms, deps.now(), items.length) : null
  const giveBackAll = async () => {
    if (grant === null) return
    await billing.allowance.release(project.id, grant.period, grant.units).catch((err) => {
      deps.log.warn({ err, project_id: project.id, units: grant.units.length }, 'allowance units of a graph not created could not be given back')
    })
  }
  if (grant !== null && grant.units.length < items.length) {
    await giveBackAll()
    return { results: refuseAll(grant.units.length, refusalError(grant.refusal!)), reading: grant.reading }
  }
  const outside = await firstRefusedOutsideParent(jobs, project.id, items)
  if (outside !== null) {
    await giveBackAll()
    return { results: refuseAll(outside.index, outside.error), reading: grant?.reading ?? null }
  }
  const ids = items.map(() => jobs.newJobId())
  const created: Array<{ job: Job; seq: number } | undefined> = new Array(items.length)
  try {
    for (const level of plan.creationOrder) {
      await runSerialPerKey(
        level.map(() => null),
        appendsInFlight,
        async (k) => {
          const i = level[k]!
          const item = items[i]!
          const unborn = plan.parentsOf[i]!.map((p) => ids[p]!)
          const asked = toNewJob(item.request, project.retry_policies, item.traceparent ?? null, (queue) => defaultTtlOf(project, queue))
          const input =
            unborn.length === 0
              ? asked
              : { ...asked, depends_on: [...(asked.depends_on ?? []), ...unborn], on_parent_failure: asked.on_parent_failure ?? 'cancel' }
          const graph = { children: plan.childrenOf[i]!.map((c) => ids[c]!), unbornParents: new Set(unborn) }
          try {
            created[i] = await jobs.create(project.id, input, { jobId: ids[i]!, actor: item.actor, graph })
          } catch (err) {
            throw new ItemFailed(i, err)
          }
        },
      )
    }
  } catch (err) {
    const failed = err instanceof ItemFailed ? err : new ItemFailed(0, err)
    await cancelCreated(ports, project.id, created)
    await giveBackAll()
    return { results: refuseAll(failed.index, failed.cause), reading: grant?.reading ?? null }
  }
  const results: CreationResult[] = created.map((c) => ({ ok: true, job: c!.job, seq: c!.seq }))
  if (grant !== null) await settleUnits(ports, project, terms, grant, results)
  return { results, reading: grant?.reading ?? null }
}

/** An item of a graph whose creation failed, and why. */
class ItemFailed extends Error {
  constructor(
    readonly index: number,
    override readonly cause: unknown,
  ) {
    super(`item ${index} was not created`)
  }
}

const errorCodeOf = (err: unknown): string => (err instanceof DomainError ? err.code : 'service_unavailable')

/**
 * The first item whose parent outside the batch refuses it, as creating it would: unknown
 * (ParentNotFound) or, under `cancel` (and for a continuation's `parent_job_id`), ended without
 * success (ParentTerminal). Read from the log, before anything of the graph is appended.
 */
async function firstRefusedOutsideParent(
  jobs: JobService,
  projectId: string,
  items: readonly CreationItem[],
): Promise<{ index: number; error: DomainError } | null> {
  const outsideOf = ({ request }: CreationItem) => [...(request.depends_on ?? []), ...(request.parent_job_id == null ? [] : [request.parent_job_id])]
  const ids = [...new Set(items.flatMap(outsideOf))]
  const states = new Map<string, Job | null>()
  await runSerialPerKey(
    ids.map(() => null),
    appendsInFlight,
    async (k) => {
      const id = ids[k]!
      const read = await jobs.load(projectId, id).then(
        (r) => r.job,
        (err: unknown) => (err instanceof JobNotFound ? null : Promise.reject(err)),
      )
      states.set(id, read)
    },
  )
  for (const [index, item] of items.entries()) {
    const strict = item.request.parent_job_id != null || (item.request.on_parent_failure ?? 'cancel') === 'cancel'
    for (const id of outsideOf(item)) {
      const parent = states.get(id) ?? null
      if (parent === null) return { index, error: new ParentNotFound(id) }
      if (strict && (parent.state === 'cancelled' || parent.state === 'dead_letter')) return { index, error: new ParentTerminal(id, parent.state) }
    }
  }
  return null
}

/**
 * Cancels the jobs of a graph that could not be created whole, children first (in the batch's
 * order a child comes after its parents): those wait for parents and never ran; a root created
 * before the failure may have been claimed the moment it existed, and is asked to stop. A job
 * that cannot be cancelled now is logged.
 */
async function cancelCreated(ports: CreationPorts, projectId: string, created: ReadonlyArray<{ job: Job } | undefined>): Promise<void> {
  const jobs = created.filter((c) => c !== undefined).map((c) => c.job.id)
  for (const jobId of jobs.reverse()) {
    await ports.jobs.cancel(projectId, jobId, undefined, true).catch((err: unknown) => {
      if (err instanceof InvalidState) return
      ports.deps.log.warn({ err, project_id: projectId, job_id: jobId }, 'a job of a graph not created whole could not be cancelled')
    })
  }
}

/**
 * One item: with `dedup` or `debounce`, the key decides first (dedup.ts), and a new job takes the
 * id the key names; a job that then cannot be created gives the key back.
 */
async function createOne(ports: CreationPorts, project: Project, item: CreationItem): Promise<CreationResult> {
  const { deps, jobs } = ports
  const asked = toNewJob(item.request, project.retry_policies, item.traceparent ?? null, (queue) => defaultTtlOf(project, queue))
  const { dedup = null, debounce = null } = item.request
  // A debounced job's first create makes it due a quiet period from now.
  const newJob = debounce === null ? asked : { ...asked, run_at: new Date(deps.now().getTime() + debounce.seconds * 1000).toISOString() }
  const admission =
    dedup !== null
      ? await admitDedup(deps, jobs, project.id, newJob.queue, dedup, newJob.payload)
      : debounce !== null
        ? await admitDebounce(deps, jobs, project.id, newJob.queue, debounce, newJob.payload)
        : null
  if (admission?.kind === 'duplicate') return { ok: true, ...admission.existing, deduplicated: true }
  const jobId = admission?.jobId ?? item.jobId
  try {
    const { job, seq } = await jobs.create(project.id, newJob, { ...(jobId === undefined ? {} : { jobId }), actor: item.actor })
    return { ok: true, job, seq }
  } catch (err) {
    if (admission !== null) {
      await releaseDedup(deps, admission.ref, admission.jobId).catch((cause: unknown) => {
        deps.log.warn(
          { err: cause, project_id: project.id, job_id: admission.jobId },
          'a dedup key whose job was not created could not be given back',
        )
      })
    }
    throw err
  }
}

/**
 * Gives back the units of items that were not created (deduplicated ones included), and records
 * the allowance warnings the created ones reached. Neither may fail the request: its jobs exist. A unit that could not be
 * given back stays counted (the safe side); a warning not recorded is logged.
 */
async function settleUnits(
  ports: CreationPorts,
  project: Project,
  terms: QuotaTerms,
  grant: Grant,
  results: readonly CreationResult[],
): Promise<void> {
  const { deps, billing } = ports
  const unused = grant.units.filter((_, i) => !isCreated(results[i]!))
  await billing.allowance.release(project.id, grant.period, unused).catch((err) => {
    deps.log.warn({ err, project_id: project.id, units: unused.length }, 'allowance units of jobs not created could not be given back')
  })
  grant.units.forEach((unit, i) => {
    if (!isCreated(results[i]!) || allowanceMarksOf(terms, unit.used + 1).length === 0) return
    billing.noteUsage(project, terms, unit.used + 1, grant.period).catch((err) => {
      deps.log.warn({ err, project_id: project.id }, 'allowance warning not recorded')
    })
  })
}
