export {
  JobsvcClient,
  JobsApi,
  WorkersApi,
  WebhooksApi,
  RecurringApi,
  AlertsApi,
  RetryPolicyApi,
  ActivityApi,
  MetricsApi,
  AuditLogApi,
  AuditApi,
  OperationsApi,
  type EventVerdict,
  type VerifyEventOptions,
  type WebhookReplay,
} from './client.js'
export { JobsvcError, CursorExpiredError, StaleCommitError } from './errors.js'
export { EventConsumersApi, type ConsumerHandler, type ConsumerContext, type ConsumerRunOptions } from './event-consumers.js'
export type { EventFeedOptions, EventsPage } from './event-feed.js'
export { ExportDownload } from './streams.js'
export type { ClientOptions, RequestOptions } from './transport.js'
export {
  Worker,
  WorkerStopped,
  JobTimeout,
  JobCancelled,
  RateLimited,
  type WorkerOptions,
  type Handler,
  type JobContext,
  type Logger,
} from './worker.js'
export { SDK_VERSION } from './version.js'
export {
  AuditVerificationError,
  canonicalJson,
  checkpointMessage,
  EMPTY_TREE_HASH,
  keyIdOf,
  leafHash,
  leafHashOfBytes,
  manifestMessage,
  nodeHash,
  toLeafObject,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
  verifyMultiInclusion,
  type AuditFailureCode,
  type AuditKey,
  type AuditKeys,
  type Checkpoint,
  type ConsistencyProof,
  type InclusionProof,
  type LeafObject,
  type ProofRange,
  type TreeHead,
  type VerifiedCheckpoint,
} from './audit.js'
export { verifyExport, type ExportVerification, type VerifyExportOptions } from './audit-export.js'
export { verifyWebhook, WebhookVerificationError, type VerifyWebhookOptions, type WebhookEvent } from './webhook.js'
export type * from './types.js'
export type { paths, components } from './openapi.js'
