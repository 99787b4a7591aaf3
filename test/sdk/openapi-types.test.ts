import { readFile } from 'node:fs/promises'
import t from 'tap'
import { renderTypes, typesFile } from '../../sdk/typescript/scripts/render-types.ts'
import { servedDocument } from '../support/served-document.ts'

// The SDK's request and response types are generated from the document the service serves; a
// route changed without regenerating them fails here, so the SDK cannot drift from the API.
t.test('sdk/typescript/src/openapi.ts is what openapi-typescript makes of the served document', async (t) => {
  const document = await servedDocument(t, import.meta.filename)
  const committed = await readFile(typesFile, 'utf8')
  const fresh = await renderTypes(document)
  t.ok(committed === fresh, 'the generated types match the served document: run `npm run generate -w @jobsvc/sdk` and commit')
  t.match(committed, /"\/jobsvc\/v1\/workers\/ack\/batch"/, 'the batch routes are typed')
  t.notMatch(committed, /"\/platform\/v1\//, 'dashboard routes are not the SDK’s')
})
