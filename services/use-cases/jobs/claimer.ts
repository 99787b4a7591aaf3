import { InvalidState, JobNotFound } from '../../../domain/errors.ts'
import type { Job } from '../../../domain/job.ts'
import { jobFromRow, jobList } from '../../../projections/job-list.ts'
import { isStorableCopyRow } from '../../../projections/job-list-copies.ts'
import type { Loaded } from '../../../streams/event-store.ts'
import { ConcurrencyConflict } from '../../../streams/errors.ts'
import type { Deps } from '../../infrastructure/runtime.ts'
import type { ClaimLine, ClaimRequest, ClaimTarget, PollDemand } from './claim-line.ts'
import type { JobService } from './job-service.ts'
import type { FlowLimits } from '../../../domain/project/index.ts'
import { GateContended, LimitRefused } from '../../../domain/flow-gate.ts'
import type { FlowControl } from './flow-control.ts'
import type { Candidate, PollSession } from './ready-index/index.ts'

/** A job a poll claimed, with the payload its worker is handed (the job's state does not carry it). */
export interface ClaimedJob {
  job: Job
  payload: Record<string, unknown>
}

/**
 * Rounds of candidates one claim takes from the index: a round whose appends lost races (another
 * process claimed first) takes the next candidates, a few times at most.
 */
const indexRounds = 3

/**
 * Candidate queries one read-model claim may run. Rows the projector has not caught up with (a
 * job claimed a moment ago still reads pending) and rows whose claim lost a race fill part of a
 * page; the next query skips the rows already seen, so a poll gets its whole capacity when that
 * many jobs are claimable, rather than answering short while jobs wait.
 */
const rowRounds = 4

/** How far the read models are, and a bounded wait for them: the API's ProjectionWatcher. */
export interface ProjectionWaiter {
  readonly reached: number
  /** Resolves to true once every read model has applied `seq`, to false after `maxWaitMs`. */
  waitFor(seq: number, maxWaitMs: number): Promise<boolean>
}

/** How a poll waits for the read models to catch up with this process's own appends (one per process). */
export interface CatchUp {
  readonly projection: ProjectionWaiter
  /** The bound of one wait (lists wait as long: `read_your_writes_wait_ms`). */
  readonly maxWaitMs: number
}

/**
 * One claim of a long poll: candidates from the ready index first, claimed with no Postgres at
 * all; then, for what the poll still wants, the read-model query through the claim line, but only
 * when the index cannot vouch for every queue of the poll (cold, past a bound, not following the
 * log) or on the poll's safety-net re-check (`recheck`, after a tick with no wake-up).
 *
 * Where the index cannot vouch, the read model may lag behind jobs this very process created
 * and answered 201 for before the poll came: a query then finds some of them, and the poll would
 * answer short although that many jobs were claimable. So when the query leaves the poll with
 * some jobs but fewer than its capacity, and the projector has not reached the last job this
 * process left pending in the project (JobService.lastPendingSeq, read before the query), the
 * poll waits for it (`catchUp`, never past `deadline`, in ms since the epoch) and looks once
 * more. A poll that found nothing does not answer yet: it waits as before, and the index wakes it
 * once its warm-up holds the jobs (ReadyIndex.open keeps a new queue cold up to this process's
 * appends), so no waiting poll re-reads the checkpoints over and over while the projector is
 * down. A queue the index vouches for never waits: the index takes this process's appends as
 * they are answered. Jobs appended by other processes reach a cold queue through the read model
 * only, so a poll may answer short of those while the projector lags (docs/architecture.md,
 * "Cold queues, bounds and stalls"); the index wakes a waiting poll once it holds them.
 *
 * Nothing is claimed from the `paused` queues of the poll, neither from the index nor from the
 * read model. Under a queue's flow limits (`flow`, issue 29) each claim first takes its job's
 * gates; a queue whose own gate is blocked is left alone like a paused one, and a blocked key's
 * jobs are passed over.
 */
export async function claimForPoll(
  jobs: JobService,
  line: ClaimLine<ClaimedJob>,
  session: PollSession,
  polled: ClaimRequest,
  signal: AbortSignal,
  recheck: boolean,
  catchUp: CatchUp,
  deadline: number,
  pausedQueues: ReadonlySet<string> = new Set(),
  flow: FlowControl | null = null,
): Promise<ClaimedJob[]> {
  const blocked = flow?.blockedQueues(polled.projectId, polled.queues)
  const paused = blocked === undefined || blocked.size === 0 ? pausedQueues : new Set([...pausedQueues, ...blocked])
  const request = paused.size === 0 ? polled : { ...polled, queues: polled.queues.filter((q) => !paused.has(q)) }
  if (request.queues.length === 0) return []
  const claimed = await claimFromIndex(jobs, session, request.workerId, request.capacity, paused, flow)
  if (claimed.length === request.capacity) return claimed
  const vouched = session.isComplete()
  if (vouched && !recheck) return claimed
  const own = jobs.lastPendingSeq.get(request.projectId) ?? 0
  claimed.push(...(await line.claim({ ...request, capacity: request.capacity - claimed.length }, signal)))
  if (claimed.length === 0 || claimed.length === request.capacity || vouched || own <= catchUp.projection.reached) return claimed
  const waitMs = Math.min(catchUp.maxWaitMs, deadline - Date.now())
  if (waitMs <= 0 || !(await catchUp.projection.waitFor(own, waitMs)) || signal.aborted) return claimed
  // The read model holds this process's jobs now; the index may hold them too, if its warm-up
  // (which follows the projector) has read the queue meanwhile. The query runs either way: one
  // more query on this rare path, and no reliance on which of the two caught up first.
  claimed.push(...(await claimFromIndex(jobs, session, request.workerId, request.capacity - claimed.length, paused, flow)))
  if (claimed.length < request.capacity) claimed.push(...(await line.claim({ ...request, capacity: request.capacity - claimed.length }, signal)))
  return claimed
}

/**
 * Claims up to `capacity` of the session's candidates, each an append at the sequence the index
 * holds for it. A candidate whose append conflicts is dropped without a reload (the follower
 * brings the job's newer state anyway), and the next ones are tried. A candidate held without its
 * payload has it read once, after its claim won. None of the `paused` queues' candidates is taken.
 */
export async function claimFromIndex(
  jobs: JobService,
  session: PollSession,
  workerId: string,
  capacity: number,
  paused?: ReadonlySet<string>,
  flow: FlowControl | null = null,
): Promise<ClaimedJob[]> {
  const claimed: ClaimedJob[] = []
  let failure: unknown
  for (let round = 0; round < indexRounds && claimed.length < capacity; round++) {
    const candidates = session.take(capacity - claimed.length, paused, flow?.fairTake() ?? null)
    if (candidates.length === 0) break
    const outcomes = await Promise.all(candidates.map((c) => claimCandidate(jobs, session, c, workerId, flow)))
    let lost = 0
    for (const outcome of outcomes) {
      // A refused candidate is back in its lane; its key is passed over from now on, so the next round takes others.
      if (outcome === 'lost' || outcome === 'refused') lost++
      else if (outcome instanceof Error) failure ??= outcome
      else claimed.push(outcome)
    }
    if (lost === 0) break
  }
  // Jobs claimed beside a failure are answered: their claims stand, and the worker should run them.
  if (claimed.length === 0 && failure !== undefined) throw failure
  return claimed
}

async function claimCandidate(
  jobs: JobService,
  session: PollSession,
  c: Candidate,
  workerId: string,
  flow: FlowControl | null,
): Promise<ClaimedJob | 'lost' | 'refused' | Error> {
  let job: Job
  try {
    const known = c.job === null ? undefined : { state: c.job, seq: c.seq }
    const limits = flow === null ? null : flow.limitsOf(c.projectId, c.queue)
    job = (await jobs.claim(c.projectId, c.jobId, workerId, known, true, limits)).state!
    session.settle(c, 'claimed')
  } catch (err) {
    if (err instanceof LimitRefused) {
      flow!.refused(c.projectId, err)
      // Cancelled under `cancel_newest`: gone from the lane; otherwise it waits there for its key's turn.
      const cancelled = err.refusal.reason === 'concurrency' && err.gate.strategy === 'cancel_newest'
      session.settle(c, cancelled ? 'lost' : 'unknown')
      return 'refused'
    }
    if (err instanceof GateContended) {
      flow!.contended(c.projectId, err.gate)
      session.settle(c, 'unknown')
      return 'refused'
    }
    if (err instanceof ConcurrencyConflict || err instanceof InvalidState || err instanceof JobNotFound) {
      session.settle(c, 'lost')
      return 'lost'
    }
    session.settle(c, 'unknown')
    return err instanceof Error ? err : new Error(String(err))
  }
  // The claim stands: a failure to read the payload is this poll's, and the reaper retries the attempt.
  try {
    // A replaced payload is read from the log, whatever the index held: the claim may have been decided on a newer state than its copy.
    return { job, payload: c.payload !== null && job.payload_seq === undefined ? c.payload : await jobs.payloadOf(c.projectId, job) }
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err))
  }
}

/**
 * The read-model side of claims, for several polls of one target in one transaction: one
 * candidate query for all of them (`LIMIT` the sum of their capacities), the candidates dealt out
 * in order, each poll taking up to its capacity; what stale or lost rows left short is asked for
 * again past the rows seen (`rowRounds`). Resolves to each poll's jobs, in the order of
 * `polls`. It runs where the ready index cannot answer for a queue (see claimForPoll).
 *
 * Candidates are claimed through the log, deciding on the row itself (a row is the job's whole
 * state at its last_seq), so a claim is one append and no load. `FOR UPDATE SKIP LOCKED` keeps
 * concurrent pollers (in any process) off each other's rows while the transaction lasts; the
 * claim's append at the job's last sequence is the real guard. The claimed rows are not written
 * here: the projector's write of `job_claimed` is the only one. Until it lands a claimed row still
 * reads pending, so `isStale` (the ready index's knowledge of newer messages) skips rows this
 * process knows are behind instead of paying a failed append for each.
 */
export async function claimForPolls(
  deps: Deps,
  jobs: JobService,
  target: ClaimTarget,
  polls: readonly PollDemand[],
  isStale: (jobId: string, seq: number) => boolean = () => false,
  flow: FlowControl | null = null,
): Promise<ClaimedJob[][]> {
  const now = deps.now()
  const claimed: ClaimedJob[][] = polls.map(() => [])
  const short = polls.map((p) => p.capacity)
  const seen: string[] = []
  let failure: unknown
  // Each claim settles on its own (its failure recorded), so this never rejects.
  let claiming: Promise<unknown> = Promise.resolve()
  try {
    await deps.sql.begin(async (tx) => {
      for (let round = 0; round < rowRounds; round++) {
        const wanted = short.reduce((sum, n) => sum + n, 0)
        if (wanted === 0) break
        const passOver = flow?.passOver(target.projectId, target.queues) ?? []
        const rows = await jobList.claimCandidates(tx, target, now, seen, wanted, passOver)
        for (const row of rows) seen.push(row.id as string)
        const candidates = rows.filter((row) => !isStale(row.id as string, row.last_seq as number))
        const dealt: Array<{ poll: number; row: (typeof candidates)[number] }> = []
        for (let poll = 0, next = 0; poll < polls.length && next < candidates.length; poll++) {
          for (let n = 0; n < short[poll]! && next < candidates.length; n++) dealt.push({ poll, row: candidates[next++]! })
        }
        claiming = Promise.all(
          dealt.map(async ({ poll, row }) => {
            try {
              // A storable copy is not the job's state nor its payload: the claim loads both from the log.
              const copy = isStorableCopyRow(row)
              const id = row.id as string
              const known = copy ? undefined : { state: jobFromRow(row), seq: row.last_seq as number }
              const limits = flow === null ? null : flow.limitsOf(target.projectId, row.queue as string)
              const job = await claimRow(jobs, target.projectId, polls[poll]!.workerId, id, known, limits, flow)
              if (job === null) return
              short[poll]!--
              // A replaced payload is read from the log too: the row may predate the replacement the claim was decided on.
              const fromLog = copy || job.payload_seq !== undefined
              const payload = fromLog ? await jobs.payloadOf(target.projectId, job) : ((row.payload as Record<string, unknown> | null) ?? {})
              claimed[poll]!.push({ job, payload })
            } catch (err) {
              failure ??= err
            }
          }),
        )
        await claiming
        // Fewer rows than asked for: the queue has no more. A failed claim ends the rounds too.
        // (A refused row is in `seen`, and its key passed over from now on: the next round looks past it.)
        if (rows.length < wanted || failure !== undefined) break
      }
    })
  } catch (err) {
    failure ??= err
  }
  // A claim is decided by its append to the log; the transaction only kept other pollers off the
  // rows. Claims made are answered even when a neighbour's append or the transaction itself
  // failed (Postgres lost before the commit): unanswered, each would wait in `processing` for the
  // reaper. A transaction whose connection closes rejects at once, so the claims still in flight
  // are waited for here.
  await claiming
  if (failure !== undefined && claimed.every((c) => c.length === 0)) throw failure
  return claimed
}

/** Claims one job from its row (`known`); null when the log says it is no longer claimable. */
async function claimRow(
  jobs: JobService,
  projectId: string,
  workerId: string,
  jobId: string,
  known: Loaded<Job> | undefined,
  limits: FlowLimits | null,
  flow: FlowControl | null,
): Promise<Job | null> {
  try {
    return (await jobs.claim(projectId, jobId, workerId, known, false, limits)).state
  } catch (err) {
    if (err instanceof InvalidState) return null
    if (err instanceof LimitRefused) {
      flow!.refused(projectId, err)
      return null
    }
    if (err instanceof GateContended) {
      flow!.contended(projectId, err.gate)
      return null
    }
    throw err
  }
}
