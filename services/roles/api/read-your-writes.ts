import type { ApiContext } from './context.ts'
import { invalidRequest } from './errors.ts'

/**
 * Before a list read from a read model: waits (bounded) until the projector has applied this
 * project's last write through this process, or the client's `min_seq` (README,
 * "Read-your-writes"). A `min_seq` the log has not reached is refused at once (400): no wait
 * would make it true, and the request would hold its place for the whole bound.
 */
export async function awaitOwnWrites(
  ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>,
  projectId: string,
  minSeq: number | undefined,
): Promise<void> {
  const own = ctx.jobs.lastWrittenSeq.get(projectId) ?? 0
  if (minSeq !== undefined && minSeq > own && !(await ctx.logHead.holds(minSeq))) {
    throw invalidRequest(`querystring.min_seq: ${minSeq} is beyond the last sequence of the log; pass an X-Event-Seq value this service answered`)
  }
  const target = Math.max(own, minSeq ?? 0)
  if (target > 0) await ctx.watcher.waitFor(target, ctx.deps.config.tunables.read_your_writes_wait_ms)
}

/** An instant (Date, ISO string or null) as ISO 8601, for views built from rows or states. */
export function isoOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : new Date(value as string).toISOString()
}
