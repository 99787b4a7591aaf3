/** The served OpenAPI document as the SDK keeps it, committed beside package.json. */
export const documentFile = new URL('../openapi.json', import.meta.url)

/**
 * The document's text as src/openapi.ts is generated from it. The same function writes
 * openapi.json and checks it in test/sdk/openapi-types.test.ts, so the file can only be what the
 * service serves.
 */
export function toSdkDocumentText(document: { paths: Record<string, unknown> }): string {
  // The dashboard's routes take a session, not an API key: they are not the SDK's.
  const paths = Object.fromEntries(Object.entries(document.paths).filter(([path]) => path.startsWith('/jobsvc/')))
  return `${JSON.stringify({ ...document, paths }, null, 2)}\n`
}
