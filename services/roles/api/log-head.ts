/**
 * Whether a sequence exists on the event log yet, for `min_seq` (read-your-writes across
 * processes). A list given a `min_seq` waits until the projector reaches it; a sequence the log
 * has not reached would hold the request for the whole wait (and re-read the checkpoints all the
 * while), so it is refused at once instead.
 *
 * The highest last sequence seen so far is kept: sequences only grow, so any `min_seq` at or
 * below it exists, without a round trip. A higher one is checked against the stream's info, read
 * after the request arrived (a cached value could be older than a write another process answered
 * a moment ago); requests that arrive while a read is running share the next one, so a flood of
 * them costs one read at a time.
 */
export class LogHead {
  readonly #read: () => Promise<number>
  #known = 0
  #running: Promise<number> | null = null
  #next: Promise<number> | null = null

  constructor(read: () => Promise<number>) {
    this.#read = read
  }

  /** Resolves true when the log holds `seq` (0 always does). */
  async holds(seq: number): Promise<boolean> {
    if (seq <= this.#known) return true
    return seq <= (await this.#freshRead())
  }

  /** The last sequence, from a read that starts no earlier than this call. */
  #freshRead(): Promise<number> {
    if (this.#running === null) return (this.#running = this.#start())
    // The running read may have begun before this request arrived: wait for the one after it.
    this.#next ??= this.#running
      .catch(() => 0)
      .then(() => {
        this.#next = null
        return (this.#running = this.#start())
      })
    return this.#next
  }

  #start(): Promise<number> {
    const read: Promise<number> = this.#read()
      .then((last) => {
        if (last > this.#known) this.#known = last
        return this.#known
      })
      .finally(() => {
        if (this.#running === read) this.#running = null
      })
    return read
  }
}
