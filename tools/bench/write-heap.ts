export interface Write {
  seq: number
  /** performance.now() when the client had the service's answer. */
  at: number
}

/** A min-heap of writes by sequence, so each checkpoint settles exactly the writes it covers. */
export class WriteHeap {
  readonly #items: Write[] = []

  peek(): Write | undefined {
    return this.#items[0]
  }

  push(item: Write): void {
    const a = this.#items
    a.push(item)
    for (let i = a.length - 1; i > 0;) {
      const parent = (i - 1) >> 1
      if (a[parent]!.seq <= a[i]!.seq) break
      ;[a[parent], a[i]] = [a[i]!, a[parent]!]
      i = parent
    }
  }

  pop(): Write | undefined {
    const a = this.#items
    const top = a[0]
    const last = a.pop()
    if (a.length > 0 && last !== undefined) {
      a[0] = last
      for (let i = 0; ;) {
        const l = 2 * i + 1
        const r = l + 1
        let m = i
        if (l < a.length && a[l]!.seq < a[m]!.seq) m = l
        if (r < a.length && a[r]!.seq < a[m]!.seq) m = r
        if (m === i) break
        ;[a[m], a[i]] = [a[i]!, a[m]!]
        i = m
      }
    }
    return top
  }
}
