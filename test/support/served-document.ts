import { httpRequest, startHarness, type TestLike } from './harness.ts'

/** Path of the API description, as the docs/api-notes.md, "API description (OpenAPI)" names it. */
export const apiDescriptionPath = '/jobsvc/v1/openapi.json'

/** The OpenAPI document a freshly started service serves (API role only). */
export async function servedDocument(t: TestLike, file: string): Promise<{ paths: Record<string, unknown> }> {
  const h = await startHarness(t, file, { roles: ['api'] })
  const res = await httpRequest<{ paths: Record<string, unknown> }>(h.url, null, 'GET', apiDescriptionPath)
  if (res.status !== 200) throw new Error(`${apiDescriptionPath} answered ${res.status}`)
  return res.body
}
