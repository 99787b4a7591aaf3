import type { ApiContext } from './app.ts'

/**
 * Before a list read from a read model: waits (bounded) until the projector has applied this
 * project's last write through this process, or the client's `min_seq` (README,
 * "Read-your-writes").
 */
export async function awaitOwnWrites(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher'>, projectId: string, minSeq: number | undefined): Promise<void> {
  const target = Math.max(ctx.jobs.lastWrittenSeq.get(projectId) ?? 0, minSeq ?? 0)
  if (target > 0) await ctx.watcher.waitFor(target, ctx.deps.config.tunables.read_your_writes_wait_ms)
}

/** An instant (Date, ISO string or null) as ISO 8601, for views built from rows or states. */
export function isoOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : new Date(value as string).toISOString()
}
