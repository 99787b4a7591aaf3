import { writeFile } from 'node:fs/promises'
import { servedDocument } from '../../../test/support/served-document.ts'
import { renderTypes, typesFile } from './render-types.ts'

// Starts the service in a namespace and database of its own, reads the document it serves and
// writes the types; the service and its namespace are removed afterwards.
const teardowns: Array<() => unknown> = []
try {
  const document = await servedDocument({ teardown: (fn) => teardowns.push(fn) }, 'generate-types.ts')
  await writeFile(typesFile, await renderTypes(document))
  console.log(`wrote ${typesFile.pathname}`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
