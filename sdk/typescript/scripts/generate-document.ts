import { writeFile } from 'node:fs/promises'
import { servedDocument } from '../../../test/support/served-document.ts'
import { documentFile, toSdkDocumentText } from './sdk-document.ts'

// Starts the service in a namespace and database of its own, reads the document it serves and
// writes openapi.json; the service and its namespace are removed afterwards. The build turns
// the file into src/openapi.ts (scripts/render-types.ts).
const teardowns: Array<() => unknown> = []
try {
  const document = await servedDocument({ teardown: (fn) => teardowns.push(fn) }, 'generate-document.ts')
  await writeFile(documentFile, toSdkDocumentText(document))
  console.log(`wrote ${documentFile.pathname}`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
