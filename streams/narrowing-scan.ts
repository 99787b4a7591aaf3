import type { NatsConnection } from '@nats-io/transport-node'
import { lastStoredOn, LogScan, type LogScanStart, type ScannedMessage } from './log-scan.ts'
import { subjectMatcher } from './names.ts'

/**
 * Messages looked at by skimming before the filtered consumer is asked for: a first page of a
 * project with a fair share of the log ends before it (and asks for none), a reader that goes on
 * or a project with a small share of the log gets one while it skims.
 */
export const narrowAfterMessages = 4_096

/**
 * The most messages a skim asks the server for at once. A skim asks for as many as it expects to
 * look at to keep the caller's batch, from the share of the messages it kept so far: a project
 * with half of the log is read in pulls of twice the batch, one with a twentieth in the largest.
 */
const maxSkimPull = 2_048

/**
 * Reads the messages of a stream on one subject filter, in order, from a start, like LogScan,
 * without paying for the filtered consumer's creation before the first message.
 *
 * Why: on NATS 2.9 creating a consumer with a wildcard filter counts the messages it will deliver
 * by matching every subject of every block after its start against the filter, so it takes tens
 * of milliseconds on a log of some ten thousand subjects, more on a longer one; a consumer
 * without a filter is created in under a millisecond (its count is a subtraction). So the scan
 * starts unfiltered at its start and keeps only what matches the filter (the skim); past
 * `narrowAfter` messages looked at, it asks for the filtered consumer in the background, from
 * after the last message looked at, and goes on skimming until it is there; then it reads from
 * it, passing over what the skim had already looked at. A wait for new messages reads from the
 * filtered consumer (created then if not yet: near the log's end that is cheap), so a live
 * reader is woken by its own messages only.
 *
 * Where the end is: the skim's consumer has no filter, so the server's "nothing more" is exact
 * (LogScan, #drained). The filtered consumer's is not on NATS 2.9, so the scan asks the log's
 * leader for the filter's last stored message once per page (after `askAgain`) and reads the
 * filtered consumer only while its position is before that message.
 */
export class NarrowingScan {
  readonly #nc: NatsConnection
  readonly #stream: string
  readonly #filter: string
  readonly #start: LogScanStart
  readonly #narrowAfter: number
  /** The unfiltered consumer, until the filtered one is there. */
  #skim: LogScan | null
  /** The filtered consumer, once read from. */
  #narrow: LogScan | null = null
  /** The filtered consumer being created in the background, and what came of it. */
  #creating: Promise<void> | null = null
  #created: LogScan | null = null
  #creationFailed = false
  /** Literal subjects, or the filter, whose last stored message is the filter's. */
  readonly #lastOf: readonly string[]
  /** The filter's last stored message as the log's leader said since the page began (null: not asked yet). */
  #narrowEnd: number | null = null
  /** Messages the skim kept (matched the filter). */
  #skimKept = 0
  /** The last message looked at (0: none yet): the filtered consumer's messages up to it are passed over. */
  #lastSeq = 0
  #closed = false

  private constructor(
    nc: NatsConnection,
    stream: string,
    filter: string,
    start: LogScanStart,
    options: { narrowAfter: number; lastOf: readonly string[] },
    skim: LogScan,
  ) {
    this.#nc = nc
    this.#stream = stream
    this.#filter = filter
    this.#start = start
    this.#narrowAfter = options.narrowAfter
    this.#lastOf = options.lastOf
    this.#skim = skim
  }

  /**
   * Starts a scan of `stream`'s messages on `filterSubject` from `start`. `narrowAfter`: messages
   * skimmed before the filtered consumer is asked for (0: at once, for a filter that keeps few
   * messages, such as one job's). `lastOf`: literal subjects that together are the filter's, when
   * there are a few (the last message of a literal subject is found at once; of a wildcard, by
   * walking the log back from its end).
   */
  static async open(
    nc: NatsConnection,
    stream: string,
    filterSubject: string,
    start: LogScanStart,
    options: { narrowAfter?: number; lastOf?: readonly string[] } = {},
  ): Promise<NarrowingScan> {
    const skim = await LogScan.open(nc, stream, null, start, subjectMatcher(filterSubject))
    const narrowAfter = options.narrowAfter ?? narrowAfterMessages
    const scan = new NarrowingScan(nc, stream, filterSubject, start, { narrowAfter, lastOf: options.lastOf ?? [filterSubject] }, skim)
    if (narrowAfter <= 0) scan.#createNarrow()
    return scan
  }

  /** Whether the scan has read everything the log held when the server last said it had nothing more. */
  get atEnd(): boolean {
    if (this.#narrow === null) return this.#skim!.atEnd
    return this.#narrowEnd !== null && this.#lastSeq >= this.#narrowEnd
  }

  /** Whether no pull may still be open at the server: only such a scan can be kept for a later page. */
  get isSettled(): boolean {
    return !this.#closed && this.#current().isSettled
  }

  /** Forgets that the end was reached: the next read asks the server again. */
  askAgain(): void {
    this.#narrowEnd = null
    this.#current().askAgain()
  }

  /**
   * Up to `max` messages on the filter the log holds now, without waiting for new ones: an empty
   * answer with `atEnd` means the scan has read everything stored when it asked (without it, the
   * log did not answer in time).
   */
  async read(max: number): Promise<ScannedMessage[]> {
    for (;;) {
      this.#adoptCreated()
      if (this.#narrow !== null) {
        this.#narrowEnd ??= (await lastStoredOn(this.#nc, this.#stream, this.#lastOf))?.seq ?? 0
        if (this.#lastSeq >= this.#narrowEnd) return []
        const batch = await this.#narrow.read(max)
        const fresh = this.#passOver(batch)
        if (fresh.length > 0 || batch.length === 0) return fresh
        continue
      }
      const skim = this.#skim!
      const before = skim.through
      const kept = await skim.read(max, this.#skimPullSize(max))
      this.#skimKept += kept.length
      this.#lastSeq = skim.through
      if (this.#creating === null && !this.#creationFailed && skim.looked >= this.#narrowAfter) this.#createNarrow()
      // Nothing kept: the end, the log not answering in time, or only other subjects (read on).
      if (kept.length > 0 || skim.through === before) return kept
    }
  }

  /**
   * Waits up to `ms` for at least one new message on the filter, then answers up to `max` of
   * those that arrived; empty when none came in time or `signal` aborted. Reads from the filtered
   * consumer, created now if it is not yet.
   */
  async wait(max: number, ms: number, signal?: AbortSignal): Promise<ScannedMessage[]> {
    const narrow = await this.#narrowNow()
    const deadline = Date.now() + ms
    for (;;) {
      const batch = await narrow.wait(max, deadline - Date.now(), signal)
      const fresh = this.#passOver(batch)
      if (fresh.length > 0 || batch.length === 0) return fresh
    }
  }

  /** Stops the scan and removes its consumers (one still being created is removed when it is there). */
  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#skim?.close()
    this.#narrow?.close()
    this.#created?.close()
  }

  /** What the skim asks for next: `max` at first, then as many as it takes to keep `max` at the share kept so far. */
  #skimPullSize(max: number): number {
    const looked = this.#skim!.looked
    if (looked === 0) return max
    if (this.#skimKept === 0) return maxSkimPull
    return Math.min(maxSkimPull, Math.max(max, Math.ceil((max * looked) / this.#skimKept)))
  }

  #current(): LogScan {
    return (this.#narrow ?? this.#skim)!
  }

  /** The filtered consumer's messages after the last one looked at (it may start before: created while the skim went on). */
  #passOver(batch: ScannedMessage[]): ScannedMessage[] {
    const fresh = batch.length > 0 && batch[0]!.seq <= this.#lastSeq ? batch.filter((m) => m.seq > this.#lastSeq) : batch
    if (batch.length > 0) this.#lastSeq = Math.max(this.#lastSeq, batch[batch.length - 1]!.seq)
    return fresh
  }

  /** From after the last message looked at, or the scan's own start when none was. */
  #narrowStart(): LogScanStart {
    return this.#lastSeq > 0 ? { seq: this.#lastSeq + 1 } : this.#start
  }

  /**
   * Asks for the filtered consumer without waiting for it. Should that fail (the log unavailable
   * for a moment), the skim goes on, and a wait asks again.
   */
  #createNarrow(): void {
    this.#creating = LogScan.open(this.#nc, this.#stream, this.#filter, this.#narrowStart()).then(
      (scan) => {
        if (this.#closed) scan.close()
        else this.#created = scan
      },
      () => {
        this.#creating = null
        this.#creationFailed = true
      },
    )
  }

  /** Reads from the filtered consumer from now on when it is there: the skim is closed. */
  #adoptCreated(): void {
    if (this.#created === null || this.#narrow !== null) return
    this.#narrow = this.#created
    this.#created = null
    this.#skim?.close()
    this.#skim = null
  }

  /** The filtered consumer, waited for (asked for first when it was not, or when asking failed). */
  async #narrowNow(): Promise<LogScan> {
    this.#adoptCreated()
    if (this.#narrow !== null) return this.#narrow
    if (this.#creating !== null) await this.#creating
    this.#adoptCreated()
    if (this.#narrow !== null) return this.#narrow
    // Not asked for yet, or asking failed: asked for now, and a failure is the caller's.
    this.#narrow = await LogScan.open(this.#nc, this.#stream, this.#filter, this.#narrowStart())
    this.#skim?.close()
    this.#skim = null
    if (this.#closed) this.#narrow.close()
    return this.#narrow
  }
}
