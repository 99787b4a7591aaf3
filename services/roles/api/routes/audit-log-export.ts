import type { FastifyPluginAsync } from 'fastify'
import type { ZodTypeProvider } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { Forbidden } from '../../../../domain/errors.ts'
import { hasRoleAtLeast } from '../../../../domain/project/index.ts'
import { activityFeed, type AuditRow } from '../../../../projections/activity.ts'
import { commandProject } from '../../../use-cases/projects/project-service.ts'
import type { ApiContext } from '../context.ts'
import { admitProjectRequest } from '../request-limit.ts'
import { rateLimitExceeded } from '../errors.ts'
import {
  exportCooldownMs,
  parseExportWindow,
  sendExport,
  wantsAttestation,
  type AttestedLayout,
  type ExportLayout,
  type ExportWindow,
} from '../export-stream.ts'
import { ExportAttestation } from '../../../use-cases/audit/export-attestation.ts'
import { assertAuditLogKept } from './audit.ts'
import { mediaResponse, sessionErrorResponses, sessionSecurity } from '../openapi.ts'
import { authenticateSession } from '../session-auth.ts'
import { formatText, windowBoundText } from '../query-fields.ts'
import { boundedString } from '../text-fields.ts'

const exportSchema = {
  summary: "Export the project's audit log in a window",
  description:
    'The activity rows of the project (admin or owner session). Both bounds inclusive, at most 90 days. Chunked; rows by `created_at` then `id`; `Content-Disposition: attachment; filename="svc-audit-log-<project_id>-<date>.<jsonl|csv>"`. JSONL fields `id, created_at, kind, target_type, target_id, summary, actor_user_id, metadata` (metadata raw JSON); CSV columns `Id, CreatedAt, Kind, TargetType, TargetId, Summary, ActorUserId, Metadata` (metadata as JSON text). One export per project per 60 s, apart from the jobs export (429 with `Retry-After`).',
  tags: ['Activity'],
  security: sessionSecurity,
  params: z.object({ projectId: boundedString(100, 1) }),
  querystring: z.object({
    from: windowBoundText.describe('ISO 8601 date-time, start of the window (required)'),
    until: windowBoundText.describe('ISO 8601 date-time, end of the window (required)'),
    format: formatText.describe('`jsonl` (default) or `csv`'),
    attest: boundedString(8)
      .optional()
      .describe(
        'extension: `true` adds to each line its event in the Merkle log (`leaf_index`, `leaf`) and ends the export with a manifest line (a checkpoint and the proof that ties every leaf to its root; docs/audit.md). JSONL only',
      ),
  }),
  response: {
    200: mediaResponse('The audit log, streamed', {
      'application/x-ndjson': 'one flat JSON object per line (format=jsonl)',
      'text/csv': 'RFC 4180 with a header row (format=csv)',
    }),
    ...sessionErrorResponses(
      'project_not_found',
      'forbidden',
      'invalid_from',
      'invalid_until',
      'invalid_range',
      'range_too_large',
      'invalid_format',
      'rate_limit_exceeded',
      'service_unavailable',
    ),
  },
}

/** An `activity` row as the export reads it. */
/** One JSONL line: flat, `metadata` spliced in as the raw JSON the projection stored (or null). */
function jsonLine(row: AuditRow): string {
  const flat = {
    id: row.id,
    created_at: row.created_at.toISOString(),
    kind: row.kind,
    target_type: row.target_type,
    target_id: row.target_id,
    summary: row.summary,
    actor_user_id: row.user_id,
  }
  return `${JSON.stringify(flat).slice(0, -1)},"metadata":${row.metadata ?? 'null'}}\n`
}

const auditLayout: ExportLayout<AuditRow> = {
  name: 'audit-log',
  jsonLine,
  csvColumns: ['Id', 'CreatedAt', 'Kind', 'TargetType', 'TargetId', 'Summary', 'ActorUserId', 'Metadata'],
  csvRecord: (row) => [row.id, row.created_at.toISOString(), row.kind, row.target_type, row.target_id, row.summary, row.user_id, row.metadata],
}

/** Each line with the event behind its row (`leaf_index`, `leaf`; null for a row the tree has no event of), and the manifest last. */
function attestedAuditLayout(attestation: ExportAttestation, window: ExportWindow): AttestedLayout<AuditRow> {
  return {
    lines: async (rows) => {
      const leaves = await attestation.ofEvents(rows.map((r) => ({ activityId: r.id, seq: Number(r.seq) })))
      return rows.map(
        (row, i) =>
          `${jsonLine(row).slice(0, -2)},"leaf_index":${leaves[i]?.leaf_index ?? null},"leaf":${JSON.stringify(leaves[i]?.leaf ?? null)}}\n`,
      )
    },
    manifest: async () => `${JSON.stringify({ manifest: await attestation.manifest('audit_log', window) })}\n`,
  }
}

/**
 * `GET /jobsvc/v1/projects/{projectId}/audit-log/export`: the project's activity rows in a window,
 * oldest first, for a dashboard session with the role admin or owner (spec, Endpoints and Exports;
 * docs/api-notes.md, "Audit-log export"). It authenticates by session, not API key, so it is registered
 * outside the `/jobsvc/v1` key hook.
 */
export function auditLogExportRoutes(ctx: Pick<ApiContext, 'deps' | 'accounts' | 'team' | 'watcher' | 'requestRate' | 'audit'>): FastifyPluginAsync {
  const { deps } = ctx
  return async (plugin) => {
    const app = plugin.withTypeProvider<ZodTypeProvider>()
    app.get('/:projectId/audit-log/export', { schema: exportSchema, config: { role: 'admin' } }, async (request, reply) => {
      const user = await authenticateSession(ctx.accounts, request.headers, deps.now())
      const { project, role } = await ctx.team.load(user, request.params.projectId)
      await admitProjectRequest(ctx, project, reply)
      // Checked before the cooldown, so that a viewer cannot hold the admins' export back.
      const needed = request.routeOptions.config.role ?? 'owner'
      if (!hasRoleAtLeast(role, needed)) throw new Forbidden(`exporting the audit log needs the project role ${needed} or above; yours is ${role}`)
      const window = parseExportWindow(request.query)
      const attest = wantsAttestation(request.query.attest, window)
      if (attest) assertAuditLogKept(ctx)
      const verdict = await ctx.accounts.limits.takeCooldown('audit-log-export', project.id, exportCooldownMs, deps.now())
      if (!verdict.admitted) throw rateLimitExceeded(verdict.retryAfterMs, 'one audit-log export per project per 60 seconds')
      const recorded = await commandProject(deps, project.id, {
        type: 'record_audit_log_export',
        data: { actor_user_id: user.id, from: window.from.toISOString(), until: window.until.toISOString(), format: window.format },
        meta: { now: deps.now().toISOString() },
      })
      // The export is the log as it stood when the export was recorded: everything before its
      // own message (waited for, bounded, should the projector lag), without its own row: that
      // row belongs to the next export whose window covers it.
      await ctx.watcher.waitFor(recorded.seq, deps.config.tunables.read_your_writes_wait_ms)
      const query = activityFeed.auditRows(deps.sql, project.id, window, recorded.seq)
      return sendExport(deps, reply, auditLayout, {
        projectId: project.id,
        window,
        query,
        attested: attest ? attestedAuditLayout(new ExportAttestation(deps, ctx.audit, project.id), window) : undefined,
      })
    })
  }
}
