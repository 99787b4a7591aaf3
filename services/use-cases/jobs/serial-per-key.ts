/**
 * Runs `work(i)` for every index of `keys`, at most `limit` at once, so a batch's appends are
 * pipelined (the publisher keeps many in flight) rather than awaited one after another. Indices
 * that share a key run one after another, in index order: they write to one aggregate (the
 * same parent, the same job), where concurrent appends would only conflict and retry. A null key
 * runs on its own. `work` reports its own failures; one that throws rejects the whole run.
 */
export async function runSerialPerKey(keys: ReadonlyArray<string | null>, limit: number, work: (index: number) => Promise<void>): Promise<void> {
  /** The indices of each key, in order; one of its own per null key. */
  const series: number[][] = []
  const byKey = new Map<string, number[]>()
  keys.forEach((key, index) => {
    if (key === null) return void series.push([index])
    const same = byKey.get(key)
    if (same !== undefined) return void same.push(index)
    const fresh = [index]
    byKey.set(key, fresh)
    series.push(fresh)
  })
  let next = 0
  const runner = async () => {
    for (let indices = series[next++]; indices !== undefined; indices = series[next++]) {
      for (const index of indices) await work(index)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, series.length) }, runner))
}
