/**
 * Runs `work(i)` for every index of `laneKeys`, at most `limit` at once, so a batch's appends are
 * pipelined (the publisher keeps many in flight) rather than awaited one after another. Indices
 * that share a lane key run one after another, in index order: they write to one aggregate (the
 * same parent, the same job), where concurrent appends would only conflict and retry. A null key
 * is a lane of its own. `work` reports its own failures; one that throws rejects the whole run.
 */
export async function runInLanes(laneKeys: ReadonlyArray<string | null>, limit: number, work: (index: number) => Promise<void>): Promise<void> {
  const lanes: number[][] = []
  const byKey = new Map<string, number[]>()
  laneKeys.forEach((key, index) => {
    if (key === null) return void lanes.push([index])
    const lane = byKey.get(key)
    if (lane !== undefined) return void lane.push(index)
    const fresh = [index]
    byKey.set(key, fresh)
    lanes.push(fresh)
  })
  let next = 0
  const runner = async () => {
    for (let lane = lanes[next++]; lane !== undefined; lane = lanes[next++]) {
      for (const index of lane) await work(index)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, lanes.length) }, runner))
}
