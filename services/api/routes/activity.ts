import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import type { ApiContext } from '../app.ts'
import { clampLimit, decodeCursor, encodeCursor } from '../pagination.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'

const listQuery = z.object({
  limit: z.string().optional(),
  cursor: z.string().optional(),
  min_seq: z.coerce.number().int().min(0).optional(),
})

/** `GET /jobsvc/v1/activity`: the project's audit trail, newest first (spec, Activity). */
export function activityRoutes(ctx: ApiContext): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/', { schema: { querystring: listQuery } }, async (request) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = clampLimit(q.limit, 20, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      await awaitOwnWrites(ctx, projectId, q.min_seq)
      const sql = deps.sql
      const rows = await sql<{ id: string; kind: string; target_type: string; target_id: string | null; summary: string; metadata: string | null; created_at: Date }[]>`
        SELECT id, kind, target_type, target_id, summary, metadata, created_at FROM activity
        WHERE project_id = ${projectId}
          ${after ? sql`AND (created_at, id) < (${after.created_at}, ${after.id})` : sql``}
        ORDER BY created_at DESC, id DESC
        LIMIT ${limit + 1}`
      const page = rows.slice(0, limit).map((r) => ({ ...r, created_at: r.created_at.toISOString() }))
      const hasMore = rows.length > limit
      const last = page.at(-1)
      return { data: page, has_more: hasMore, next_cursor: hasMore && last ? encodeCursor({ created_at: last.created_at, id: last.id }) : null }
    })
  }
}
