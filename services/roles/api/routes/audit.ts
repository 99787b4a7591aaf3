import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { auditLog } from '../../../../projections/audit-log.ts'
import type { ApiContext } from '../context.ts'
import { invalidRequest, serviceUnavailable } from '../errors.ts'
import { errorResponses, instant, noSecurity, publicErrorResponses, writeCodes } from '../openapi.ts'
import { parseLimit } from '../pagination.ts'
import { limitText, windowBoundText } from '../query-fields.ts'
import { boundedString } from '../text-fields.ts'
import { awaitOwnWrites } from '../read-your-writes.ts'

const hex64 = z.string().meta({ examples: ['a3f1c2d4e5b6978812345678909abcdefa3f1c2d4e5b6978812345678909abcd'] })

export const checkpointView = z
  .strictObject({
    project_id: z.string(),
    tree_size: z.number().int().describe("how many of the project's leaves the root covers"),
    root_hash: hex64.describe('RFC 6962 MTH of the first `tree_size` leaves, lower-case hex'),
    issued_at: instant.describe('RFC 3339 UTC with milliseconds, as signed'),
    key_id: z.string().describe('the signing key (`GET /jobsvc/v1/audit/keys`)'),
    signature: z.string().describe('Ed25519 over `"jobsvc-audit-checkpoint-v1\\n"` + the JCS of the other five fields, base64 (docs/audit.md)'),
  })
  .describe("A signed checkpoint of the project's Merkle log")

const keyView = z.strictObject({
  key_id: z.string().describe('the first 16 hex characters of SHA-256 of the raw public key'),
  algorithm: z.literal('Ed25519'),
  public_key: z.string().describe('the 32 raw bytes, base64'),
  valid_from: instant,
  valid_until: instant.nullable().describe('null: the key signs now'),
})

const tags = ['Audit']

/** A count in a query (a leaf index, a tree size, a cursor): bounded before it is parsed. */
const countText = boundedString(32).optional()

/** A non-negative integer query value; anything else is 400 `invalid_request` naming the field. */
function count(raw: string | undefined, field: string): number {
  const n = raw !== undefined && /^\d{1,15}$/.test(raw) ? Number(raw) : Number.NaN
  if (!Number.isSafeInteger(n)) throw invalidRequest(`${field} must be a non-negative integer`)
  return n
}

const rfc3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i

function instantOf(raw: string | undefined, field: string): string | null {
  if (raw === undefined || raw === '') return null
  if (!rfc3339.test(raw) || Number.isNaN(Date.parse(raw))) throw invalidRequest(`${field} must be an RFC 3339 date-time`)
  return new Date(Date.parse(raw)).toISOString()
}

const schemas = {
  issue: {
    summary: "Sign a checkpoint of the project's audit log now",
    description:
      "Signs the root of the project's Merkle log over every event the log has taken in, after this process's own writes (docs/audit.md). 201 with the new checkpoint; 200 with the newest one when the tree has not grown since it. Needs `admin` (or the API key). Each checkpoint is also an event (`checkpoint_issued`) and a webhook (`audit.checkpoint`).",
    tags,
    response: { 200: checkpointView, 201: checkpointView, ...errorResponses(...writeCodes, 'service_unavailable') },
  },
  list: {
    summary: "The project's signed checkpoints, oldest first",
    tags,
    querystring: z.object({
      from: windowBoundText.describe('RFC 3339: issued at or after'),
      until: windowBoundText.describe('RFC 3339: issued before'),
      after: countText.describe('a `next_cursor`: the checkpoints after it'),
      limit: limitText.describe('1–1,000 (default 100)'),
    }),
    response: {
      200: z.strictObject({ data: z.array(checkpointView), has_more: z.boolean(), next_cursor: z.string().nullable() }),
      ...errorResponses('invalid_limit', 'service_unavailable'),
    },
  },
  inclusion: {
    summary: 'An inclusion proof (RFC 9162 §2.1.3)',
    description: 'The hashes that lead from leaf `leaf_index` to the root of the first `tree_size` leaves. Needs `admin` (or the API key).',
    tags,
    querystring: z.object({ leaf_index: countText.describe('the leaf, from 0'), tree_size: countText.describe('the size of the tree proven') }),
    response: {
      200: z.strictObject({ leaf_index: z.number().int(), tree_size: z.number().int(), inclusion_path: z.array(hex64) }),
      ...errorResponses('service_unavailable'),
    },
  },
  consistency: {
    summary: 'A consistency proof (RFC 9162 §2.1.4)',
    description: 'The hashes that prove the tree of `first` leaves is a prefix of the tree of `second`. Needs `admin` (or the API key).',
    tags,
    querystring: z.object({ first: countText.describe('the smaller tree size, at least 1'), second: countText.describe('the larger tree size') }),
    response: {
      200: z.strictObject({ first: z.number().int(), second: z.number().int(), consistency_path: z.array(hex64) }),
      ...errorResponses('service_unavailable'),
    },
  },
  keys: {
    summary: 'The keys that sign audit checkpoints',
    description: 'Every key that ever signed, with its window; no credentials. A verifier needs nothing else from the service (docs/audit.md).',
    tags,
    security: noSecurity,
    response: { 200: z.strictObject({ data: z.array(keyView) }), ...publicErrorResponses() },
  },
}

/** 503 where the install keeps no Merkle log (`audit_log_enabled` off): nothing to sign or prove. */
export function assertAuditLogKept(ctx: Pick<ApiContext, 'deps'>): void {
  if (!ctx.deps.config.tunables.audit_log_enabled)
    throw serviceUnavailable('this installation keeps no audit log (the audit_log_enabled tunable is off)')
}

/** The tree's size as projected, and a 400 for a size beyond it. */
async function treeSizeAtLeast(ctx: Pick<ApiContext, 'deps'>, projectId: string, size: number, field: string): Promise<void> {
  const have = (await auditLog.tree(ctx.deps.sql, projectId))?.size ?? 0
  if (size > have) throw invalidRequest(`${field}: the project's audit log has ${have} leaves`)
}

/** `/jobsvc/v1/audit`: checkpoints and proofs of the project's Merkle log (docs/audit.md). */
export function auditRoutes(ctx: Pick<ApiContext, 'deps' | 'audit' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.addHook('onRequest', async () => assertAuditLogKept(ctx))
    app.post('/checkpoints', { schema: schemas.issue, config: { role: 'admin' } }, async (request, reply) => {
      const projectId = request.principal.projectId
      await awaitOwnWrites(ctx, projectId, undefined)
      const { checkpoint, issued, seq } = await ctx.audit.issue(projectId)
      if (issued) ctx.jobs.lastWrittenSeq.set(projectId, Math.max(seq, ctx.jobs.lastWrittenSeq.get(projectId) ?? 0))
      return reply
        .code(issued ? 201 : 200)
        .header('X-Event-Seq', String(seq))
        .send(checkpoint)
    })
    app.get('/checkpoints', { schema: schemas.list, config: { role: 'admin' } }, async (request) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = parseLimit(q.limit, 100, 1, 1000)
      const after = q.after === undefined || q.after === '' ? 0 : count(q.after, 'after')
      await awaitOwnWrites(ctx, projectId, undefined)
      const rows = await auditLog.checkpoints(ctx.deps.sql, projectId, instantOf(q.from, 'from'), instantOf(q.until, 'until'), after, limit + 1)
      const data = rows.slice(0, limit)
      return { data, has_more: rows.length > limit, next_cursor: data.length === 0 ? null : String(data[data.length - 1]!.tree_size) }
    })
    app.get('/proofs/inclusion', { schema: schemas.inclusion, config: { role: 'admin' } }, async (request) => {
      const projectId = request.principal.projectId
      const leafIndex = count(request.query.leaf_index, 'leaf_index')
      const treeSize = count(request.query.tree_size, 'tree_size')
      if (leafIndex >= treeSize) throw invalidRequest('leaf_index must be below tree_size')
      await treeSizeAtLeast(ctx, projectId, treeSize, 'tree_size')
      return {
        leaf_index: leafIndex,
        tree_size: treeSize,
        inclusion_path: await auditLog.inclusionPath(ctx.deps.sql, projectId, leafIndex, treeSize),
      }
    })
    app.get('/proofs/consistency', { schema: schemas.consistency, config: { role: 'admin' } }, async (request) => {
      const projectId = request.principal.projectId
      const first = count(request.query.first, 'first')
      const second = count(request.query.second, 'second')
      if (first === 0) throw invalidRequest('first must be at least 1: an empty tree is a prefix of every tree, nothing to prove')
      if (first > second) throw invalidRequest('first must not exceed second: a log only grows')
      await treeSizeAtLeast(ctx, projectId, second, 'second')
      return { first, second, consistency_path: await auditLog.consistencyPath(ctx.deps.sql, projectId, first, second) }
    })
  }
}

/**
 * `GET /jobsvc/v1/audit/keys`, outside the project routes' credentials.
 * @noProjectRole public: a verifier needs the signing keys and no credentials (docs/audit.md)
 */
export function auditKeyRoutes(ctx: Pick<ApiContext, 'audit'>): FastifyPluginAsync {
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/', { schema: schemas.keys }, async () => ({ data: await ctx.audit.publishedKeys() }))
  }
}
