import { maxParents } from './job-options.ts'

/**
 * A whole graph in one batch (issue 30): items name themselves with `ref` and their parents of
 * the same batch with `depends_on_refs`, beside parents that exist already (`depends_on`). A ref
 * may only name an EARLIER item, so a batch lists parents before their children and a cycle is
 * impossible by construction: following parents always leads to a lower index. This is the
 * graph's validation and its order of creation; nothing here does I/O.
 */

/** A `ref`'s length at most. */
export const maxRefLength = 100

/**
 * Jobs one graph batch may create, where a plain batch may create 1,000: a fan-out of 1,000 with
 * its fan-ins (ten of 100 parents, the most a job may have) and their sink fits in one request,
 * created whole. Split in two, its fan-ins would name the running children by id, and each
 * such parent costs an append of its own (job_child_attached) that refs do not.
 */
export const maxGraphBatchJobs = 2_000

export interface GraphItem {
  ref?: string | null
  depends_on_refs?: readonly string[] | null
  depends_on?: readonly string[] | null
}

export interface GraphPlan {
  /** Per item, the indexes of its parents in the batch, in the order its `depends_on_refs` names them. */
  parentsOf: number[][]
  /** Per item, its children in the batch (the items naming it), in batch order. */
  childrenOf: number[][]
  /** Items by depth from the leaves: `creationOrder[0]` have no child in the batch, the last hold the roots. */
  creationOrder: number[][]
}

/** Whether the batch is a graph: some item has a `ref` or names parents by ref. */
export function isGraphBatch(items: readonly GraphItem[]): boolean {
  return items.some((item) => item.ref != null || item.depends_on_refs != null)
}

/** isGraphBatch of items not validated yet (anything a request's `jobs` may hold). */
export function looksLikeGraphBatch(items: readonly unknown[]): boolean {
  return isGraphBatch(items.filter((item): item is GraphItem => typeof item === 'object' && item !== null && !Array.isArray(item)))
}

/**
 * The graph of a batch, or, per failing item, why it is not one: a ref used twice, a parent ref
 * no earlier item has (unknown, later, or the item's own), a parent named twice, more than
 * `maxParents` parents with `depends_on`.
 */
export function planGraph(items: readonly GraphItem[]): { ok: true; plan: GraphPlan } | { ok: false; errors: Map<number, string> } {
  const errors = new Map<number, string>()
  const indexOf = new Map<string, number>()
  const parentsOf: number[][] = items.map(() => [])
  items.forEach((item, i) => {
    const refs = item.depends_on_refs ?? []
    const parents: number[] = []
    for (const ref of refs) {
      if (ref === item.ref) return void errors.set(i, `depends_on_refs: the item cannot depend on itself (${ref})`)
      const at = indexOf.get(ref)
      if (at === undefined) return void errors.set(i, `depends_on_refs: no earlier item of the batch has the ref ${ref} (parents come first)`)
      if (parents.includes(at)) return void errors.set(i, `depends_on_refs: ${ref} is named twice`)
      parents.push(at)
    }
    const total = refs.length + (item.depends_on?.length ?? 0)
    if (total > maxParents) return void errors.set(i, `a job has at most ${maxParents} parents (depends_on and depends_on_refs together: ${total})`)
    parentsOf[i] = parents
    if (item.ref != null) {
      if (indexOf.has(item.ref)) return void errors.set(i, `ref: ${item.ref} is used by an earlier item`)
      indexOf.set(item.ref, i)
    }
  })
  if (errors.size > 0) return { ok: false, errors }
  const childrenOf: number[][] = items.map(() => [])
  parentsOf.forEach((parents, child) => parents.forEach((p) => childrenOf[p]!.push(child)))
  // Height above the leaves: a child always has a higher index than its parents, so walking back
  // from the last item sees every child before its parents.
  const height = new Array<number>(items.length).fill(0)
  for (let i = items.length - 1; i >= 0; i--) for (const c of childrenOf[i]!) height[i] = Math.max(height[i]!, height[c]! + 1)
  const creationOrder: number[][] = []
  height.forEach((h, i) => (creationOrder[h] ??= []).push(i))
  return { ok: true, plan: { parentsOf, childrenOf, creationOrder } }
}
