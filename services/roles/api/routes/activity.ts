import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { activityFeed } from '../../../../projections/activity.ts'
import { hasRoleAtLeast } from '../api-key-directory.ts'
import type { ApiContext } from '../context.ts'
import { cursorPage, errorResponses, instant } from '../openapi.ts'
import { clampLimit, decodeCursor, encodeCursor } from '../pagination.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'
import { cursorText, limitText, minSeq } from '../query-fields.ts'
import { boundedString } from '../text-fields.ts'

/** Kinds one filter may name: more than the spec's enumeration holds. */
const maxKindsPerFilter = 100

/** A comma-separated list of activity kinds (an extension, issue 26: the dashboard hides job creations). */
const kindList = boundedString(4000)
  .optional()
  .transform((text, ctx) => {
    if (text === undefined) return null
    const kinds = [
      ...new Set(
        text
          .split(',')
          .map((k) => k.trim())
          .filter((k) => k !== ''),
      ),
    ]
    if (kinds.length > maxKindsPerFilter || kinds.some((k) => !/^[a-z0-9_]{1,64}$/.test(k))) {
      ctx.addIssue({
        code: 'custom',
        message: `a comma-separated list of at most ${maxKindsPerFilter} activity kinds (lower-case letters, digits, _)`,
      })
      return z.NEVER
    }
    return kinds
  })

const listQuery = z.object({
  limit: limitText,
  cursor: cursorText,
  min_seq: minSeq,
  kinds: kindList.describe('extension: only these kinds, comma-separated (e.g. `job_dead_lettered,alert_triggered`)'),
  exclude_kinds: kindList.describe('extension: every kind but these, comma-separated (e.g. `job_created`)'),
})

export const activityItem = z
  .strictObject({
    id: z.string().describe('ULID'),
    kind: z.string().describe('one of the activity kinds of the spec, e.g. job_created'),
    target_type: z.string().describe('`job`, `recurring`, `alert`, `project`, `api_key`, `member` or (extension) `queue`'),
    target_id: z.string().nullable(),
    summary: z.string(),
    metadata: z.string().nullable().describe('JSON text with extra context'),
    created_at: instant,
  })
  .meta({ id: 'ActivityItem' })

/**
 * What a session below `admin` reads of the trail: the rows about the project's jobs, schedules and
 * alerts, which its role reads through their own routes anyway. The rest (webhook URLs, pending
 * invitees, keys, team, billing, exports) is for admins and the owner, the roles that may read the
 * webhooks, the invitations and the audit-log export.
 */
export const trailTargetsBelowAdmin = ['job', 'recurring', 'alert']

const listSchema = {
  summary: "The project's audit trail, newest first",
  description: `\`limit\` is clamped to 1–100 (default 20). Extensions: \`kinds\` keeps only the kinds it lists, \`exclude_kinds\` leaves out those it lists (both comma-separated); a cursor stays valid with the same filters. \`min_seq\` (an \`X-Event-Seq\` value) makes the read wait until the feed includes that write. An API key, an admin or the owner reads every row; a viewer's or member's session reads only the rows whose \`target_type\` is ${trailTargetsBelowAdmin.map((t) => `\`${t}\``).join(', ')}.`,
  tags: ['Activity'],
  querystring: listQuery,
  response: { 200: cursorPage(activityItem), ...errorResponses('invalid_cursor') },
}

/** `GET /jobsvc/v1/activity`: the project's audit trail, newest first (spec, Activity). */
export function activityRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/', { schema: listSchema, config: { role: 'viewer' } }, async (request) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = clampLimit(q.limit, 20, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      await awaitOwnWrites(ctx, projectId, q.min_seq)
      const wholeTrail = hasRoleAtLeast(request.principal.role, 'admin')
      const { rows, hasMore } = await activityFeed.page(deps.sql, projectId, wholeTrail ? null : trailTargetsBelowAdmin, after, limit, {
        only: q.kinds,
        without: q.exclude_kinds,
      })
      const page = rows.map((r) => ({ ...r, created_at: r.created_at.toISOString() }))
      const last = page.at(-1)
      return { data: page, has_more: hasMore, next_cursor: hasMore && last ? encodeCursor({ created_at: last.created_at, id: last.id }) : null }
    })
  }
}
