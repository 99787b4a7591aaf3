import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript'

/** Where the generated types live, beside the SDK's hand-written code. */
export const typesFile = new URL('../src/openapi.ts', import.meta.url)

/**
 * The SDK's request and response types from the service's own OpenAPI document. The same
 * function writes src/openapi.ts and checks it in test/sdk/openapi-types.test.ts, so the file can
 * only be what the served document gives.
 */
export async function renderTypes(document: { paths: Record<string, unknown> }): Promise<string> {
  // The dashboard's routes take a session, not an API key: they are not the SDK's.
  const paths = Object.fromEntries(Object.entries(document.paths).filter(([path]) => path.startsWith('/jobsvc/')))
  const ast = await openapiTS(structuredClone({ ...document, paths }) as never, { alphabetize: true, silent: true })
  return `${COMMENT_HEADER}// Regenerate with \`npm run generate -w @jobsvc/sdk\` after a route changes.\n\n${astToString(ast)}`
}
