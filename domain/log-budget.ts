/**
 * What a project's log budget (bytes appended per hour, by plan) may refuse. Every append of a
 * project counts against it; past it, appends that add work or history are refused (a create,
 * single, batch or recurring, attaching a continuation, a progress report, a retry by hand,
 * a recurring schedule's change), while those that finish or repair work already accepted (a
 * claim, an ack, the reaper, a promotion, a continuation's activation, a cancellation) and the
 * project's own settings are counted but never refused: refusing them would strand jobs, not
 * save bytes.
 */
const budgetedEventTypes: ReadonlySet<string> = new Set(['job_created', 'job_child_attached', 'job_progressed', 'job_retried', 'recurring_upserted'])

/** True when an append of these events is refused past the project's log budget. */
export function isBudgeted(eventTypes: readonly string[]): boolean {
  return eventTypes.some((t) => budgetedEventTypes.has(t))
}
