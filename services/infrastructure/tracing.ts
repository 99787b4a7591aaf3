import { ROOT_CONTEXT, trace, type Context, type Tracer } from '@opentelemetry/api'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace'
import { toTraceparent } from '../../domain/trace-context.ts'

/**
 * The service's own spans, exported through the OpenTelemetry SDK to an OTLP/HTTP collector when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set. Spans are batched and sent off the request path; without
 * the setting no provider is made and nothing is recorded.
 */
export interface Tracing {
  tracer: Tracer
  /** Sends the spans still buffered, then stops exporting. */
  shutdown(): Promise<void>
}

export function startTracing(endpoint: string, serviceName: string): Tracing {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, '')}/v1/traces` }),
        // Spans reach the collector within a second, still in batches sent off the request path.
        scheduledDelayMillis: 1_000,
      }),
    ],
  })
  return { tracer: provider.getTracer('jobsvc'), shutdown: () => provider.shutdown() }
}

/** The context a request's `traceparent` header continues, or the root when it has none valid. */
export function remoteParent(header: unknown): Context {
  const traceparent = toTraceparent(header)
  if (traceparent === null) return ROOT_CONTEXT
  const [, traceId, spanId, flags] = traceparent.split('-')
  return trace.setSpanContext(ROOT_CONTEXT, { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16), isRemote: true })
}
