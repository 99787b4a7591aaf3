import { keptProjections } from '../../../projections/index.ts'
import { reprojectFailures, type FailureScope, type Reprojection } from '../../../projections/projection-failures.ts'
import { decodeEventMessage, type EventRecord } from '../../../streams/event-store.ts'
import { eventsStreamName } from '../../../streams/names.ts'
import type { Deps } from '../../infrastructure/runtime.ts'

/**
 * `npm run replay -- --subject <subject>` or `--project <project_id>`: re-applies the messages of
 * that aggregate or project that a read model could not hold (`projection_failures`), once the
 * cause is fixed, with the projector's own code, and clears those that now succeed. Unlike a
 * full replay it empties nothing and needs no pause of the running projector.
 */
export async function reprojectFailed(deps: Deps, scope: FailureScope): Promise<Reprojection> {
  const stream = eventsStreamName(deps.config.namespace)
  const recordAt = async (seq: number): Promise<EventRecord | null> => {
    const stored = await deps.nats.jsm.direct.getMessage(stream, { seq })
    return stored === null ? null : { seq: stored.seq, subject: stored.subject, message: decodeEventMessage(stored.data, stored.seq) }
  }
  return reprojectFailures(deps.sql, keptProjections({ auditLog: deps.config.tunables.audit_log_enabled }), scope, recordAt)
}
