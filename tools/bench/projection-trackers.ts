import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import type { NatsHandles } from '../../streams/connection.ts'
import { checkpointSubject } from '../../streams/names.ts'
import { HttpError, type Client } from './http-client.ts'
import { WriteHeap, type Write } from './write-heap.ts'

/**
 * The list route waits at most this long for the projector (the read_your_writes_wait_ms
 * default); a probe that answers well inside it has seen the projector reach its min_seq.
 */
const serviceListWaitMs = 2_000
const probeReachedWithinMs = serviceListWaitMs * 0.75
const probeIntervalMs = 50

/**
 * Projection lag: for a write the service answered at `at` (a 201 or an ack, with its
 * X-Event-Seq), the time until the read models are seen to include that sequence. It is the
 * staleness a list reader without read-your-writes would see, measured from the moment the
 * client learnt of the write.
 */
export interface ProjectionTracker {
  readonly method: string
  observe(seq: number, at: number): void
  /** Resolves with the moment the read models were seen to include `seq`. */
  reachedAt(seq: number, signal: AbortSignal): Promise<number>
  lags(): readonly number[]
  /** The highest sequence known to be projected, when the method knows it. */
  position(): number | null
  close(): void
}

/**
 * Exact, for every write: the projector announces each committed checkpoint on
 * `<ns>.ctl.checkpoint` (the subject the API's read-your-writes waits use). The first
 * announcement at or beyond a write's sequence settles it. An announcement that arrived before
 * the client had its answer counts as zero lag.
 */
class CheckpointTracker implements ProjectionTracker {
  readonly method = 'projector checkpoint announcements (every write)'
  readonly #pending = new WriteHeap()
  readonly #lags: number[] = []
  readonly #waiters = new Set<{ seq: number; resolve: (at: number) => void }>()
  readonly #subscription: { unsubscribe(): void }
  #reached = 0

  constructor(nats: NatsHandles, ns: string) {
    this.#subscription = nats.nc.subscribe(checkpointSubject(ns), {
      callback: (err, msg) => {
        if (err) return
        const seq = Number(msg.string())
        if (Number.isFinite(seq)) this.#advance(seq, performance.now())
      },
    })
  }

  #advance(seq: number, now: number): void {
    if (seq <= this.#reached) return
    this.#reached = seq
    for (let top = this.#pending.peek(); top !== undefined && top.seq <= seq; top = this.#pending.peek()) {
      this.#pending.pop()
      this.#lags.push(Math.max(0, now - top.at))
    }
    for (const w of this.#waiters) {
      if (w.seq <= seq) {
        this.#waiters.delete(w)
        w.resolve(now)
      }
    }
  }

  observe(seq: number, at: number): void {
    if (seq <= this.#reached) this.#lags.push(0)
    else this.#pending.push({ seq, at })
  }

  reachedAt(seq: number, signal: AbortSignal): Promise<number> {
    if (seq <= this.#reached) return Promise.resolve(performance.now())
    return new Promise((resolvePromise, reject) => {
      const waiter = { seq, resolve: resolvePromise }
      this.#waiters.add(waiter)
      signal.addEventListener(
        'abort',
        () => {
          this.#waiters.delete(waiter)
          reject(signal.reason)
        },
        { once: true },
      )
    })
  }

  lags(): readonly number[] {
    return this.#lags
  }

  position(): number | null {
    return this.#reached
  }

  close(): void {
    this.#subscription.unsubscribe()
  }
}

/**
 * Over HTTP only (the namespace is unknown): every ~50 ms a probe takes the newest write seen
 * so far and asks `GET /jobs?limit=1&min_seq=<its seq>`, which the service holds until its
 * projector reaches that sequence (bounded by serviceListWaitMs). The lag sample is from that
 * write's answer to the probe's answer. It is an upper bound: it includes one round trip, and the
 * service also waits for the project's later writes it already made.
 */
class ProbeTracker implements ProjectionTracker {
  readonly method = 'min_seq list probes every 50 ms (upper bound)'
  readonly #client: Client
  readonly #lags: number[] = []
  #newest: Write | null = null
  #probed = 0
  readonly #stop = new AbortController()

  constructor(client: Client, signal: AbortSignal) {
    this.#client = client
    this.#sample(AbortSignal.any([signal, this.#stop.signal])).catch(() => undefined)
  }

  async #probe(seq: number, signal: AbortSignal): Promise<number> {
    for (;;) {
      const sent = performance.now()
      signal.throwIfAborted()
      const reply = await this.#client.request('GET', `/jobsvc/v1/jobs?limit=1&min_seq=${seq}`)
      if (reply.status !== 200) throw new HttpError('projection probe', reply)
      if (reply.at - sent < probeReachedWithinMs) return reply.at
    }
  }

  async #sample(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const write = this.#newest
      if (write !== null && write.seq > this.#probed) {
        this.#probed = write.seq
        const at = await this.#probe(write.seq, signal)
        this.#lags.push(Math.max(0, at - write.at))
      }
      await sleep(probeIntervalMs, undefined, { signal })
    }
  }

  observe(seq: number, at: number): void {
    if (this.#newest === null || seq > this.#newest.seq) this.#newest = { seq, at }
  }

  reachedAt(seq: number, signal: AbortSignal): Promise<number> {
    return this.#probe(seq, signal)
  }

  lags(): readonly number[] {
    return this.#lags
  }

  position(): number | null {
    return null
  }

  close(): void {
    this.#stop.abort()
  }
}

/**
 * A fresh tracker for each phase, the one before closed: one phase's writes never settle another's
 * lags. Exact announcements when the bench knows the namespace and reaches its NATS; list probes
 * otherwise.
 */
export class PhaseTrackers {
  readonly #open: () => ProjectionTracker
  #current: ProjectionTracker | null = null

  constructor(nats: NatsHandles | null, namespace: string | null, client: Client, signal: AbortSignal) {
    this.#open = () => (nats !== null && namespace !== null ? new CheckpointTracker(nats, namespace) : new ProbeTracker(client, signal))
  }

  next(): ProjectionTracker {
    this.#current?.close()
    this.#current = this.#open()
    return this.#current
  }

  close(): void {
    this.#current?.close()
  }
}
