import { Writable } from 'node:stream'
import { pino } from 'pino'
import t from 'tap'
import { createMailer, tokenLink, verificationMail } from '../../services/infrastructure/mailer.ts'
import { startSmtpSink, tokenFromMail } from '../support/smtp-sink.ts'

t.test('without SMTP_URL an e-mail is written to the log, link and all', async (t) => {
  const lines: string[] = []
  const sink = new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) })
  const mailer = createMailer(null, pino({ level: 'info' }, sink))
  await mailer.send(verificationMail('ada@example.com', tokenLink('https://dash.example.test/', '/verify', 'usr_x.secret')))
  const logged = JSON.parse(lines.join('')) as { mail: { to: string; subject: string; text: string } }
  t.equal(logged.mail.to, 'ada@example.com')
  t.match(logged.mail.text, 'https://dash.example.test/verify?token=usr_x.secret')
})

t.test('with SMTP_URL it is sent over SMTP, token link in the text body', async (t) => {
  const smtp = await startSmtpSink(t)
  const mailer = createMailer(smtp.url, pino({ level: 'silent' }))
  t.teardown(() => mailer.close())
  await mailer.send(verificationMail('bob@example.com', tokenLink('https://dash.example.test/app', '/verify', 'usr_y.s3cr3t')))
  const mail = await smtp.next('bob@example.com', /verify/i)
  t.equal(tokenFromMail(mail), 'usr_y.s3cr3t')
  t.match(mail.text, 'https://dash.example.test/app/verify?token=', 'under PUBLIC_URL, its path included')
})
