import { SMTPServer } from 'smtp-server'
import type { TestLike } from './harness.ts'

export interface ReceivedMail {
  to: string[]
  subject: string
  /** The decoded text body. */
  text: string
}

/** Undoes quoted-printable (RFC 2045): soft line breaks and `=XX` escapes. */
function decodeQuotedPrintable(body: string): string {
  const joined = body.replace(/=\r?\n/g, '')
  return Buffer.from(
    joined.replace(/=([0-9A-F]{2})/gi, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))),
    'latin1',
  ).toString('utf8')
}

/**
 * Undoes RFC 2047 encoded words (`=?UTF-8?Q?…?=`, `=?UTF-8?B?…?=`) in a header value, as a mail
 * client shows it (white space between two encoded words is dropped). Nodemailer encodes a
 * subject holding a double quote or anything outside ASCII this way.
 */
function decodeEncodedWords(value: string): string {
  const word = /=\?[^?]+\?([QqBb])\?([^?]*)\?=/g
  return value.replace(/(=\?[^?]+\?[QqBb]\?[^?]*\?=)\s+(?==\?)/g, '$1').replace(word, (_m, encoding: string, text: string) => {
    const bytes =
      encoding.toUpperCase() === 'B'
        ? Buffer.from(text, 'base64')
        : Buffer.from(
            text.replace(/_/g, ' ').replace(/=([0-9A-F]{2})/gi, (_x, hex: string) => String.fromCharCode(parseInt(hex, 16))),
            'latin1',
          )
    return bytes.toString('utf8')
  })
}

function parseMail(raw: string, to: string[]): ReceivedMail {
  const split = raw.indexOf('\r\n\r\n')
  const head = raw.slice(0, split)
  const body = raw.slice(split + 4).replace(/\r\n\.?\r\n$/, '')
  const headers = head.replace(/\r\n[ \t]+/g, ' ')
  const subject = decodeEncodedWords(/^subject: (.*)$/im.exec(headers)?.[1] ?? '')
  const encoding = /^content-transfer-encoding: (.*)$/im.exec(headers)?.[1]?.trim().toLowerCase()
  const text =
    encoding === 'quoted-printable' ? decodeQuotedPrintable(body) : encoding === 'base64' ? Buffer.from(body, 'base64').toString('utf8') : body
  return { to, subject, text }
}

/**
 * A real SMTP server on loopback that keeps what it receives: the service sends to it over
 * SMTP exactly as it would to a relay.
 */
export interface SmtpSink {
  url: string
  mails: ReceivedMail[]
  /**
   * Refuses the next `times` mails to `to` with a temporary error (451), as a relay that is
   * down or over its limits would.
   */
  refuse(to: string, times: number): void
  /** How many mails to `to` were refused so far. */
  refusedCount(to: string): number
  /** Waits for the next mail to `to` whose subject matches, newer than the ones already taken. */
  next(to: string, subject?: RegExp, timeoutMs?: number): Promise<ReceivedMail>
}

export async function startSmtpSink(t: TestLike): Promise<SmtpSink> {
  const mails: ReceivedMail[] = []
  const taken = new Set<ReceivedMail>()
  const toRefuse = new Map<string, number>()
  const refused = new Map<string, number>()
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onRcptTo(address, _session, callback) {
      const to = address.address.toLowerCase()
      const left = toRefuse.get(to) ?? 0
      if (left <= 0) return callback()
      toRefuse.set(to, left - 1)
      refused.set(to, (refused.get(to) ?? 0) + 1)
      callback(Object.assign(new Error('mailbox busy, try again later'), { responseCode: 451 }))
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = []
      stream.on('data', (c: Buffer) => chunks.push(c))
      stream.on('end', () => {
        mails.push(
          parseMail(
            Buffer.concat(chunks).toString('utf8'),
            session.envelope.rcptTo.map((r) => r.address.toLowerCase()),
          ),
        )
        callback()
      })
    },
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const address = server.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  return {
    url: `smtp://127.0.0.1:${port}`,
    mails,
    refuse(to, times) {
      toRefuse.set(to.toLowerCase(), times)
    },
    refusedCount: (to) => refused.get(to.toLowerCase()) ?? 0,
    async next(to, subject, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const found = mails.find((m) => !taken.has(m) && m.to.includes(to.toLowerCase()) && (subject === undefined || subject.test(m.subject)))
        if (found) {
          taken.add(found)
          return found
        }
        if (Date.now() > deadline) throw new Error(`no mail to ${to}${subject ? ` matching ${subject}` : ''} within ${timeoutMs} ms`)
        await new Promise((r) => setTimeout(r, 20))
      }
    },
  }
}

/** The `token=` parameter of the first link in a mail (CONTRACT.md, E-mail). */
export function tokenFromMail(mail: ReceivedMail): string {
  const match = /[?&]token=([^\s&]+)/.exec(mail.text)
  if (!match) throw new Error(`no token link in mail: ${mail.text}`)
  return decodeURIComponent(match[1]!)
}
