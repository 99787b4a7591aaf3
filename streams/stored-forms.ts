import { upgradeDelivery, type StoredDelivery } from '../domain/delivery.ts'
import { toStoredJob, upgradeJob, type Job, type StoredJob } from '../domain/job.ts'
import { lastReportOf } from '../domain/job-progress.ts'
import { upgradeProject, type StoredProject } from '../domain/project/index.ts'
import { upgradeRecurringJob, type StoredRecurringJob } from '../domain/recurring-job.ts'
import { upgradeUser, type StoredUser } from '../domain/user.ts'
import type { AggregateKind } from './names.ts'

type Events = readonly { type: string; data: unknown }[]

/**
 * How an aggregate's state is written into its messages and read back, where that is not the
 * state as decided:
 * - `job`: the state refers to what it does not carry (the payload, the last error; see
 *   domain/job.ts), and a reference to the message itself is resolved once its sequence is known;
 *   a graph job's `waiting_for` is written as a mask over its `depends_on` (toStoredJob).
 *   Messages written before (schema 1) are upgraded when read.
 * - `progress`: the message carries only its `job_progressed` event; the state (the last report)
 *   is read from it.
 * - the others are written as decided; a state written before fields were added to its aggregate
 *   is upgraded when read by its aggregate's `upgrade` (domain/), so every reader sees today's
 *   shape and no reader defaults a field.
 */
interface StoredForm {
  /** The `state` a message is written with. */
  toStored(state: unknown): unknown
  /** The state of a message stored at `seq` (null: not known), from its `state` and its events. */
  fromStored(stored: unknown, seq: number | null, events: Events): unknown
}

/** The form of an aggregate written as decided and read through `upgrade`. */
function upgradedBy<Stored>(upgrade: (stored: Stored) => unknown): StoredForm {
  return {
    toStored: (state) => state,
    fromStored: (stored) => (stored === null || stored === undefined ? null : upgrade(stored as Stored)),
  }
}

const storedForms: Partial<Record<AggregateKind, StoredForm>> = {
  job: {
    toStored: (state) => (state === null || state === undefined ? state : toStoredJob(state as Job)),
    fromStored: (stored, seq, events) => (stored === null || stored === undefined ? null : upgradeJob(stored as StoredJob, seq, events)),
  },
  progress: {
    toStored: () => null,
    fromStored: (stored, _seq, events) => stored ?? lastReportOf(events),
  },
  project: upgradedBy<StoredProject>(upgradeProject),
  user: upgradedBy<StoredUser>(upgradeUser),
  recurring: upgradedBy<StoredRecurringJob>(upgradeRecurringJob),
  delivery: upgradedBy<StoredDelivery>(upgradeDelivery),
}

/** The state a message of `aggregate` is written with. */
export function toStoredState(aggregate: AggregateKind, state: unknown): unknown {
  const form = storedForms[aggregate]
  return form === undefined ? state : form.toStored(state)
}

/**
 * The state of a message of `aggregate` stored at `seq`, as its aggregate's code reads it: applied
 * to every message decoded, and to a decision's state once its message is stored.
 */
export function fromStoredState(aggregate: AggregateKind, stored: unknown, seq: number | null, events: Events): unknown {
  const form = storedForms[aggregate]
  return form === undefined ? stored : form.fromStored(stored, seq, events)
}
