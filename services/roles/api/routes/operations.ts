import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { operationStatuses, type Operation } from '../../../../domain/operation.ts'
import { operationList, type OperationEntry } from '../../../../projections/operations.ts'
import { OperationService } from '../../../use-cases/operations/operation-service.ts'
import type { ApiContext } from '../context.ts'
import { cursorPage, errorResponses, instant, writeCodes } from '../openapi.ts'
import { decodeCursor, encodeCursor, parseLimit } from '../pagination.ts'
import { cursorText, limitText, minSeq } from '../query-fields.ts'
import { awaitOwnWrites, isoOrNull } from '../read-your-writes.ts'
import { boundedString } from '../text-fields.ts'

/** `op_…`; any other id is a 404. */
const idParams = z.object({ id: boundedString(2048, 1) })

export const operationSchema = z
  .strictObject({
    id: z.string().describe('`op_…`'),
    kind: z
      .string()
      .describe(
        'what it does: `webhook_replay` (POST /jobsvc/v1/webhooks/{id}/replay), `job_bulk` (POST /jobsvc/v1/jobs/bulk); later kinds may be added',
      ),
    status: z.enum(operationStatuses).describe('`running` until it ends: `succeeded`, `cancelled` (DELETE) or `failed` (see `error`)'),
    matched: z.number().int().describe('items it found to act on (a replay: the events it sends; a bulk action: the jobs it changes)'),
    processed: z.number().int().describe('items acted on so far (a replay: deliveries made; a bulk action: jobs reached)'),
    succeeded: z.number().int().describe('of those, the ones that ended well (a replay: delivered; a bulk action: jobs changed)'),
    failed: z
      .number()
      .int()
      .describe('and the ones that ended badly (a replay: deliveries that failed; a bulk action: jobs skipped, their state no longer allowing it)'),
    error: z.strictObject({ code: z.string(), message: z.string() }).nullable().describe('why a failed operation stopped; null otherwise'),
    created_at: instant,
    finished_at: instant.nullable(),
  })
  .meta({ id: 'Operation' })

function operationView(op: Operation | OperationEntry): z.output<typeof operationSchema> {
  return {
    id: op.id,
    kind: op.kind,
    status: op.status,
    matched: op.matched,
    processed: op.processed,
    succeeded: op.succeeded,
    failed: op.failed,
    error: op.error,
    created_at: isoOrNull(op.created_at)!,
    finished_at: isoOrNull(op.finished_at),
  }
}

const tags = ['Operations']

const listSchema = {
  summary: "The project's operations, newest first",
  description:
    '`limit` 1–100 (default 50; outside: `invalid_limit`). `min_seq` (an `X-Event-Seq` value) makes the read wait until the list includes that write.',
  tags,
  querystring: z.object({ limit: limitText, cursor: cursorText, min_seq: minSeq }),
  response: { 200: cursorPage(operationSchema), ...errorResponses('forbidden', 'invalid_limit', 'invalid_cursor') },
}

const readSchema = {
  summary: 'Read an operation',
  description: 'Read from the log: it shows the operation as it stands now, progress included.',
  tags,
  params: idParams,
  response: { 200: operationSchema, ...errorResponses('forbidden', 'operation_not_found') },
}

const cancelSchema = {
  summary: 'Stop an operation',
  description:
    'It does nothing more from now on; what it did stays done (a replay: the deliveries it made still go out). Stopping a cancelled one again answers it as it is; one that has ended otherwise is 409 `invalid_state`.',
  tags,
  params: idParams,
  response: { 200: operationSchema, ...errorResponses(...writeCodes, 'operation_not_found', 'invalid_state') },
}

/**
 * `GET /jobsvc/v1/operations`, `GET` and `DELETE /jobsvc/v1/operations/{id}`: the project's
 * long-running actions: webhook replays and bulk job actions, which only admins may start, so
 * reading and stopping one needs the same role.
 */
export function operationRoutes(ctx: Pick<ApiContext, 'deps' | 'jobs' | 'watcher' | 'logHead'>): FastifyPluginAsync {
  const { deps, jobs } = ctx
  const operations = new OperationService(deps)
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()

    app.get('/', { schema: listSchema, config: { role: 'admin' } }, async (request) => {
      const q = request.query
      const projectId = request.principal.projectId
      const limit = parseLimit(q.limit, 50, 1, 100)
      const after = q.cursor === undefined ? null : decodeCursor(q.cursor)
      await awaitOwnWrites(ctx, projectId, q.min_seq)
      const { rows, hasMore } = await operationList.page(deps.sql, projectId, after, limit)
      const last = rows.at(-1)
      return {
        data: rows.map(operationView),
        has_more: hasMore,
        next_cursor: hasMore && last ? encodeCursor({ created_at: last.created_at.toISOString(), id: last.id }) : null,
      }
    })

    app.get('/:id', { schema: readSchema, config: { role: 'admin' } }, async (request) =>
      operationView(await operations.load(request.principal.projectId, request.params.id)),
    )

    app.delete('/:id', { schema: cancelSchema, config: { role: 'admin' } }, async (request) => {
      const projectId = request.principal.projectId
      const result = await operations.cancel(projectId, request.params.id, request.principal.actor)
      jobs.noteWritten(projectId, result.seq)
      return operationView(result.state!)
    })
  }
}
