/**
 * Every aggregate's command handler (streams/aggregate-handler.ts): its kind, its decider and how
 * it is addressed, bound once. The layers above load and decide through these and nothing else,
 * which the lint rule `jobsvc-aggregates/no-untyped-store` (tools/lint/no-untyped-store.js) enforces.
 */
import { alertDecider } from '../domain/alert.ts'
import { auditTrailDecider } from '../domain/audit-checkpoint.ts'
import { auditSigningKeyDecider } from '../domain/audit-signing-key.ts'
import { auditExpiryDecider } from '../domain/audit-expiry.ts'
import { dedupKeyDecider } from '../domain/dedup-key.ts'
import { deliveryDecider } from '../domain/delivery.ts'
import { flowGateDecider } from '../domain/flow-gate.ts'
import { emailRegistryDecider } from '../domain/email-registry.ts'
import { eventConsumerDecider } from '../domain/event-consumer.ts'
import { jobDecider } from '../domain/job.ts'
import { jobProgressDecider } from '../domain/job-progress.ts'
import { operationDecider } from '../domain/operation.ts'
import { projectDecider } from '../domain/project/index.ts'
import { promoCodeDecider } from '../domain/promo-code.ts'
import { recurringJobDecider } from '../domain/recurring-job.ts'
import { userDecider } from '../domain/user.ts'
import { webhookDecider } from '../domain/webhook.ts'
import { aggregateHandler } from './aggregate-handler.ts'
import { platformScope } from './names.ts'

/** Most aggregates belong to a project and have an id of their own. */
const inProject = (projectId: string, id: string) => ({ projectId, id })

/** Users, e-mail claims and promotion codes belong to no project. */
const onPlatform = (id: string) => ({ projectId: platformScope, id })

export const jobHandler = aggregateHandler({ kind: 'job', decider: jobDecider, address: inProject })

/** A job's progress reports: an aggregate of their own (domain/job-progress.ts), keyed by the job's id. */
export const progressHandler = aggregateHandler({ kind: 'progress', decider: jobProgressDecider, address: inProject })

/** A project is its own scope: `ref(projectId)`. */
export const projectHandler = aggregateHandler({
  kind: 'project',
  decider: projectDecider,
  address: (projectId: string) => ({ projectId, id: projectId }),
})

export const recurringHandler = aggregateHandler({ kind: 'recurring', decider: recurringJobDecider, address: inProject })

export const userHandler = aggregateHandler({ kind: 'user', decider: userDecider, address: onPlatform })

/** `ref(key)`: the claim's id is a digest of the address (services/use-cases/platform/accounts.ts, `emailRef`). */
export const emailClaimHandler = aggregateHandler({ kind: 'email', decider: emailRegistryDecider, address: onPlatform })

export const promoCodeHandler = aggregateHandler({ kind: 'promo', decider: promoCodeDecider, address: onPlatform })

export const alertHandler = aggregateHandler({ kind: 'alert', decider: alertDecider, address: inProject })

export const webhookHandler = aggregateHandler({ kind: 'webhook', decider: webhookDecider, address: inProject })

export const deliveryHandler = aggregateHandler({ kind: 'delivery', decider: deliveryDecider, address: inProject })

/** A project's named event consumer, keyed by its name (domain/event-consumer.ts). */
export const eventConsumerHandler = aggregateHandler({ kind: 'consumer', decider: eventConsumerDecider, address: inProject })

/** A long-running action of a project (a webhook replay; later bulk job actions): `ref(projectId, operationId)`. */
export const operationHandler = aggregateHandler({ kind: 'operation', decider: operationDecider, address: inProject })

/** A project's signed checkpoints: `ref(projectId)` (domain/audit-checkpoint.ts). */
export const auditTrailHandler = aggregateHandler({
  kind: 'audit',
  decider: auditTrailDecider,
  address: (projectId: string) => ({ projectId, id: projectId }),
})

/** A key that signs checkpoints, of the platform: `ref(keyId)` (domain/audit-signing-key.ts). */
export const auditSigningKeyHandler = aggregateHandler({ kind: 'audit_key', decider: auditSigningKeyDecider, address: onPlatform })

/** The leaves of a project's Merkle log whose messages retention removed: `ref(projectId)` (domain/audit-expiry.ts). */
export const auditExpiryHandler = aggregateHandler({
  kind: 'audit_expiry',
  decider: auditExpiryDecider,
  address: (projectId: string) => ({ projectId, id: projectId }),
})

/**
 * A deduplication key of a project's jobs: `ref(projectId, id)`, the id a digest of the key's
 * scope and text (services/use-cases/jobs/dedup.ts, `dedupKeyRef`), since a key holds characters
 * a subject token cannot.
 */
export const dedupKeyHandler = aggregateHandler({ kind: 'dedup', decider: dedupKeyDecider, address: inProject })

/** A flow gate of a queue or of one of its keys (domain/flow-gate.ts): `ref(projectId, gateId)`, the id a digest of the gate's name. */
export const gateHandler = aggregateHandler({ kind: 'gate', decider: flowGateDecider, address: inProject })
