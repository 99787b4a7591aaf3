/**
 * RFC 4180, written from the RFC rather than with the service's CSV library, so the export tests
 * check the service against the standard: CRLF records, quoted fields, doubled quotes.
 */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = []
  let row: string[] = []
  let field = ''
  let quoted = false
  const endField = () => {
    row.push(field)
    field = ''
  }
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"'
        i++
      } else if (c === '"') {
        quoted = false
      } else {
        field += c
      }
    } else if (c === '"') {
      quoted = true
    } else if (c === ',') {
      endField()
    } else if (c === '\r' && text[i + 1] === '\n') {
      endField()
      rows.push(row)
      row = []
      i++
    } else {
      field += c
    }
  }
  if (field !== '' || row.length > 0) {
    endField()
    rows.push(row)
  }
  return rows
}
