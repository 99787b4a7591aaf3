import { readFile, writeFile } from 'node:fs/promises'
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript'
import { documentFile } from './sdk-document.ts'

// Run by the build, before tsc: src/openapi.ts is generated, not committed, so the types are
// always those of the committed openapi.json.
const typesFile = new URL('../src/openapi.ts', import.meta.url)
const document = JSON.parse(await readFile(documentFile, 'utf8'))
const ast = await openapiTS(document, { alphabetize: true, silent: true })
await writeFile(typesFile, `${COMMENT_HEADER}// Generated from openapi.json by the build (scripts/render-types.ts).\n\n${astToString(ast)}`)
