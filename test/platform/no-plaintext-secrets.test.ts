import { createHash, randomBytes } from 'node:crypto'
import t from 'tap'
import { eventually } from '../support/harness.ts'
import { freshEmail, newVerifiedUser, sessionFrom, startPlatformHarness, totpCode } from '../support/platform.ts'
import { tokenFromMail } from '../support/smtp-sink.ts'
import { eventsStreamName, platformScope } from '../../streams/names.ts'

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

/** The secret part of an e-mailed token (`<id>.<secret>` or `<project>.<invite>.<secret>`). */
const secretPart = (token: string) => token.slice(token.lastIndexOf('.') + 1)

/** Labels of the needles found in `haystack`, compared case-insensitively (bytes read as latin1). */
function found(haystack: string, needles: ReadonlyMap<string, string>): string[] {
  const lower = haystack.toLowerCase()
  return [...needles].filter(([, needle]) => lower.includes(needle.toLowerCase())).map(([label]) => label)
}

/** A request whose answer is kept as the bytes that came over the wire. */
async function raw(
  url: string,
  apiKey: string,
  method: string,
  path: string,
  idempotencyKey: string,
  body?: unknown,
): Promise<{ status: number; replayed: boolean; text: string }> {
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}`, 'idempotency-key': idempotencyKey }
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: res.status, replayed: res.headers.get('idempotent-replay') === 'true', text: await res.text() }
}

t.test('no plaintext secret reaches Postgres, the event log or any stream or KV bucket', async (t) => {
  const h = await startPlatformHarness(t, import.meta.filename)
  const tag = randomBytes(4).toString('hex')
  const passwords = [`First-pass-${tag}-a1`, `Second-pass-${tag}-b2`, `Third-pass-${tag}-c3`] as const

  // Sign up with the first password, verify (first API key), log in.
  const u = await newVerifiedUser(h, { password: passwords[0] })
  const verifyMail = h.smtp.mails.find((m) => m.to.includes(u.email) && /verify/i.test(m.subject))
  t.ok(verifyMail, 'the verification mail was received')
  const verificationToken = tokenFromMail(verifyMail!)

  // Forgot + reset to the second password.
  const forgot = await h.platform('POST', '/platform/v1/auth/forgot', { email: u.email })
  t.equal(forgot.status, 200, JSON.stringify(forgot.body))
  const resetToken = tokenFromMail(await h.smtp.next(u.email, /reset/i))
  const reset = await h.platform('POST', '/platform/v1/auth/reset', { token: resetToken, new_password: passwords[1] })
  t.equal(reset.status, 200, JSON.stringify(reset.body))
  const afterReset = await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: passwords[1] })
  t.equal(afterReset.status, 200, JSON.stringify(afterReset.body))

  // Change to the third password.
  const changed = await h.platform(
    'POST',
    '/platform/v1/auth/change-password',
    { current_password: passwords[1], new_password: passwords[2] },
    { jwt: sessionFrom(afterReset) },
  )
  t.equal(changed.status, 200, JSON.stringify(changed.body))
  const jwt = sessionFrom(changed)

  // 2FA: setup (secret), verify, regenerate the recovery codes, log in with one of them.
  const setup = await h.platform('POST', '/platform/v1/auth/2fa/setup', undefined, { jwt })
  t.equal(setup.status, 200, JSON.stringify(setup.body))
  const totpSecret = setup.body.secret as string
  t.match(totpSecret, /^[A-Z2-7]+=*$/, 'a base32 secret')
  const enabled = await h.platform('POST', '/platform/v1/auth/2fa/verify', { code: totpCode(totpSecret) }, { jwt })
  t.equal(enabled.status, 200, JSON.stringify(enabled.body))
  const regenerated = await h.platform('POST', '/platform/v1/auth/2fa/recovery/regenerate', undefined, { jwt })
  t.equal(regenerated.status, 200, JSON.stringify(regenerated.body))
  const codes = regenerated.body.codes as string[]
  t.equal(codes.length, 10, '10 recovery codes')
  const recoveryLogin = await h.platform('POST', '/platform/v1/auth/login', { email: u.email, password: passwords[2], recovery_code: codes[0] })
  t.equal(recoveryLogin.status, 200, JSON.stringify(recoveryLogin.body))
  t.equal(recoveryLogin.body.recovery_code_used, true)
  const session = sessionFrom(recoveryLogin)

  // Rotate the key (second API key) and invite a member (invite token).
  const rotated = await h.platform('POST', `/platform/v1/projects/${u.projectId}/keys/rotate`, undefined, { jwt: session })
  t.equal(rotated.status, 200, JSON.stringify(rotated.body))
  const secondKey = rotated.body.api_key as string
  const invitee = freshEmail('invitee')
  const invited = await h.platform('POST', `/platform/v1/projects/${u.projectId}/members`, { email: invitee, role: 'member' }, { jwt: session })
  t.equal(invited.status, 201, JSON.stringify(invited.body))
  const inviteToken = tokenFromMail(await h.smtp.next(invitee, /invited/i))

  // A webhook created and its secret rotated with an Idempotency-Key: both answers hold a
  // signing secret, and each is replayed from the stored answer.
  const created = await raw(h.url, secondKey, 'POST', '/jobsvc/v1/webhooks', `hook-create-${tag}`, {
    url: 'https://8.8.8.8/hook',
    events: ['job.created'],
  })
  t.equal(created.status, 201, created.text)
  const hook = JSON.parse(created.text) as { id: string; secret: string }
  t.match(hook.secret, /^whsec_/, 'the create answer shows the signing secret')
  const createReplay = await raw(h.url, secondKey, 'POST', '/jobsvc/v1/webhooks', `hook-create-${tag}`, {
    url: 'https://8.8.8.8/hook',
    events: ['job.created'],
  })
  t.same([createReplay.status, createReplay.replayed], [201, true], 'the create is replayed')
  t.equal(createReplay.text, created.text, 'byte for byte')
  const rotated2 = await raw(h.url, secondKey, 'POST', `/jobsvc/v1/webhooks/${hook.id}/rotate-secret`, `hook-rotate-${tag}`)
  t.equal(rotated2.status, 200, rotated2.text)
  const rotatedSecret = (JSON.parse(rotated2.text) as { secret: string }).secret
  t.match(rotatedSecret, /^whsec_/, 'the rotate answer shows the new secret')
  const rotateReplay = await raw(h.url, secondKey, 'POST', `/jobsvc/v1/webhooks/${hook.id}/rotate-secret`, `hook-rotate-${tag}`)
  t.same([rotateReplay.status, rotateReplay.replayed], [200, true], 'the rotation is replayed')
  t.equal(rotateReplay.text, rotated2.text, 'byte for byte')

  const secrets = new Map<string, string>([
    ['password 1 (signup)', passwords[0]],
    ['password 2 (reset)', passwords[1]],
    ['password 3 (change)', passwords[2]],
    ['api key 1', u.apiKey],
    ['api key 1, part after the prefix', u.apiKey.slice(24)],
    ['api key 2', secondKey],
    ['api key 2, part after the prefix', secondKey.slice(24)],
    ['verification token', verificationToken],
    ['verification token, secret part', secretPart(verificationToken)],
    ['reset token', resetToken],
    ['reset token, secret part', secretPart(resetToken)],
    ['invite token', inviteToken],
    ['invite token, secret part', secretPart(inviteToken)],
    ['TOTP secret', totpSecret],
    ['webhook secret (create)', hook.secret],
    ['webhook secret (create), part after whsec_', hook.secret.slice('whsec_'.length)],
    ['webhook secret (rotate)', rotatedSecret],
    ['webhook secret (rotate), part after whsec_', rotatedSecret.slice('whsec_'.length)],
    ...codes.map((c, i) => [`recovery code ${i + 1}`, c] as [string, string]),
  ])
  t.equal(new Set(secrets.values()).size, secrets.size, 'every secret is distinct')
  t.ok(
    [...secrets.values()].every((s) => s.length >= 9),
    'every secret is long enough not to occur by chance',
  )

  // Wait until the projector has applied the whole log: the latest kinds are in `activity`
  // and every checkpoint has reached the stream's last sequence.
  const { sql } = h.runtime
  const stream = eventsStreamName(h.config.namespace)
  const lastSeq = (await h.runtime.nats.jsm.streams.info(stream)).state.last_seq
  const wanted = [
    'password_reset',
    'password_changed',
    'two_factor_enabled',
    'recovery_codes_regenerated',
    'recovery_code_used',
    'api_key_rotated',
    'member_invited',
    'webhook_secret_rotated',
  ]
  await eventually(
    async () => {
      const rows = await sql<{ kind: string }[]>`SELECT DISTINCT kind FROM activity WHERE user_id = ${u.userId} OR project_id = ${u.projectId}`
      const kinds = new Set(rows.map((r) => r.kind))
      if (!wanted.every((k) => kinds.has(k))) return false
      const [cp] = await sql<{ low: number | null }[]>`SELECT min(last_seq)::int AS low FROM projection_checkpoints`
      return cp?.low !== null && cp!.low >= lastSeq
    },
    15_000,
    'the projector to catch up with the event log',
  )

  await t.test('(a) every row of every table in the database', async (t) => {
    const tables = await sql<{ table_name: string }[]>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name`
    t.ok(tables.length >= 5, `the schema has tables (${tables.map((r) => r.table_name).join(', ')})`)
    let dump = ''
    let rows = 0
    for (const { table_name: name } of tables) {
      const lines = await sql.unsafe<{ j: string }[]>(`SELECT row_to_json(t)::text AS j FROM "${name.replace(/"/g, '""')}" t`)
      rows += lines.length
      for (const line of lines) dump += `${name}: ${line.j}\n`
    }
    t.ok(rows > 0 && dump.length > 0, `the dump is not empty (${rows} rows, ${dump.length} characters)`)
    t.ok(dump.includes(u.email), "sanity: the user's e-mail address is in the dump")
    t.ok(dump.includes(invitee), "sanity: the invitee's address is in the dump (activity)")
    t.ok(dump.includes(sha256(secondKey)), "sanity: the second key's SHA-256 hash is in the dump (api_keys)")
    t.ok(dump.includes(secondKey.slice(0, 24)), "sanity: the second key's non-secret prefix is in the dump")
    t.same(found(dump, secrets), [], 'no plaintext secret in any row')
  })

  await t.test('(b) every message of the event stream, body and headers', async (t) => {
    const info = await h.runtime.nats.jsm.streams.info(stream)
    const last = info.state.last_seq
    t.ok(last >= lastSeq, `the stream has ${info.state.messages} messages up to seq ${last}`)
    let bodies = ''
    let headers = ''
    let messages = 0
    let userEvents = 0
    const userSubjectPrefix = `${h.config.namespace}.evt.${platformScope}.user.${u.userId}`
    for (let seq = 1; seq <= last; seq++) {
      const msg = await h.runtime.nats.jsm.streams.getMessage(stream, { seq }).catch(() => null)
      if (msg === null) continue
      messages += 1
      if (msg.subject === userSubjectPrefix) userEvents += 1
      bodies += `${Buffer.from(msg.data).toString('latin1')}\n`
      // The header block may be missing at runtime on a message published without one.
      const header = msg.header as typeof msg.header | undefined
      if (header) for (const [key, values] of header) headers += `${key}: ${values.join(', ')}\n`
      headers += `subject: ${msg.subject}\n`
    }
    t.equal(messages, info.state.messages, 'every stored message was read')
    t.ok(userEvents >= 8, `sanity: the user's aggregate has its events in the stream (${userEvents})`)
    t.ok(bodies.includes(u.email), "sanity: the user's e-mail address is in the raw message bytes")
    t.ok(bodies.includes(sha256(verificationToken)), "sanity: the verification token's SHA-256 hash is in the raw bytes")
    t.ok(headers.length > 0, 'sanity: the messages carry headers')
    t.same(found(bodies, secrets), [], 'no plaintext secret in any message body')
    t.same(found(headers, secrets), [], 'no plaintext secret in any message header or subject')
  })

  await t.test('(c) every message of every stream of the namespace, the KV buckets included', async (t) => {
    const { jsm } = h.runtime.nats
    const streams: string[] = []
    for await (const info of jsm.streams.list()) if (info.config.name.includes(h.config.namespace)) streams.push(info.config.name)
    const bucket = (name: string) => streams.find((s) => s.startsWith('KV_') && s.endsWith(name))
    t.ok(
      bucket('_idempotency') && bucket('_auth_limits') && bucket('_heartbeats'),
      `sanity: the KV buckets are among the streams (${streams.join(', ')})`,
    )
    t.ok(streams.includes(stream), 'sanity: so is the event stream')
    const texts = new Map<string, string>()
    for (const name of streams) {
      const info = await jsm.streams.info(name)
      let text = ''
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
        const msg = await jsm.streams.getMessage(name, { seq }).catch(() => null)
        if (msg === null) continue
        text += `${msg.subject}\n${Buffer.from(msg.data).toString('latin1')}\n`
        const header = msg.header as typeof msg.header | undefined
        if (header) for (const [key, values] of header) text += `${key}: ${values.join(', ')}\n`
      }
      texts.set(name, text)
    }
    const idempotency = texts.get(bucket('_idempotency')!) ?? ''
    t.ok(idempotency.includes('"state":"done"'), 'sanity: the idempotency bucket holds the two stored answers')
    t.notOk(idempotency.includes(hook.id), "sanity: the stored answers are sealed (not even the webhook's id shows)")
    t.ok((texts.get(bucket('_auth_limits')!) ?? '').length > 0, 'sanity: the auth limits bucket holds windows')
    for (const [name, text] of texts) t.same(found(text, secrets), [], `no plaintext secret in ${name} (subjects, bodies, headers)`)
  })
})
