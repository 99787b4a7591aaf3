import { useState } from 'preact/hooks'
import { encode } from 'uqr'
import { call } from '../api.js'
import { formatTime } from '../format.js'
import { ErrorNotice, html, Loading, useLoad, useSubmit } from '../ui.js'
import { Field, NewPasswordField } from './account.js'

/** A short confirmation after a save, read out by screen readers. */
const Saved = ({ when }) => (when ? html`<p role="status" class="muted small">Saved.</p>` : null)

function ProfileForm({ me, onChanged }) {
  const [draft, setDraft] = useState({ display_name: me.display_name ?? '', timezone: me.timezone, locale: me.locale })
  const [saved, setSaved] = useState(false)
  const save = useSubmit(async () => {
    setSaved(false)
    await call('PATCH', '/platform/v1/auth/profile', { body: { ...draft, display_name: draft.display_name === '' ? null : draft.display_name } })
    setSaved(true)
    await onChanged()
  })
  const set = (key) => (value) => setDraft({ ...draft, [key]: value })
  return html`<form onSubmit=${save.submit} aria-labelledby="profile-title">
    <h2 id="profile-title">Profile</h2>
    <p class="muted">${me.email}${me.email_verified ? '' : ' (not verified)'}</p>
    <${Field}
      label="Display name"
      name="display_name"
      autocomplete="name"
      maxlength="100"
      value=${draft.display_name}
      onValue=${set('display_name')}
    />
    <${Field} label="Time zone (IANA name)" name="timezone" placeholder="Europe/Paris" required value=${draft.timezone} onValue=${set('timezone')} />
    <${Field} label="Locale (BCP-47)" name="locale" placeholder="en-GB" required value=${draft.locale} onValue=${set('locale')} />
    <${ErrorNotice} error=${save.error} />
    <${Saved} when=${saved} />
    <button type="submit" disabled=${save.busy}>Save the profile</button>
  </form>`
}

function PasswordForm() {
  const [current, setCurrent] = useState('')
  const [next, setNext] = useState('')
  const [message, setMessage] = useState(null)
  const change = useSubmit(async () => {
    setMessage((await call('POST', '/platform/v1/auth/change-password', { body: { current_password: current, new_password: next } })).message)
    setCurrent('')
    setNext('')
  })
  return html`<form onSubmit=${change.submit} aria-labelledby="password-title">
    <h2 id="password-title">Password</h2>
    <${Field}
      label="Current password"
      type="password"
      name="current_password"
      autocomplete="current-password"
      required
      value=${current}
      onValue=${setCurrent}
    />
    <${NewPasswordField} value=${next} onValue=${setNext} />
    <${ErrorNotice} error=${change.error} />
    ${message ? html`<p role="status">${message} Your other sessions have ended.</p>` : null}
    <button type="submit" disabled=${change.busy}>Change the password</button>
  </form>`
}

/** The otpauth URI drawn as a QR code: one SVG path, no inline style (CSP) and no image request. */
function QrCode({ text }) {
  const { data, size } = encode(text, { border: 2 })
  let path = ''
  data.forEach((row, y) => row.forEach((dark, x) => dark && (path += `M${x} ${y}h1v1h-1z`)))
  return html`<svg class="qr" viewBox=${`0 0 ${size} ${size}`} role="img" aria-label="QR code for your authenticator app" data-qr>
    <rect width=${size} height=${size} fill="#fff" />
    <path d=${path} fill="#000" />
  </svg>`
}

function RecoveryCodes({ codes }) {
  return html`<div class="secret" role="status">
    <p>Recovery codes, each good for one log-in without your authenticator. Shown only this once:</p>
    <ul class="recovery-codes" data-recovery-codes>
      ${codes.map((code) => html`<li><code>${code}</code></li>`)}
    </ul>
    <p class="muted small">Store them now: they will not be shown again. New ones replace them all.</p>
  </div>`
}

function TwoFactor({ me, onChanged }) {
  const [pending, setPending] = useState(null)
  const [code, setCode] = useState('')
  const [password, setPassword] = useState('')
  const [codes, setCodes] = useState(null)
  const setup = useSubmit(async () => setPending(await call('POST', '/platform/v1/auth/2fa/setup')))
  const verify = useSubmit(async () => {
    await call('POST', '/platform/v1/auth/2fa/verify', { body: { code: code.trim() } })
    // Enabling issues no recovery codes: the first set is made here and shown once.
    setCodes((await call('POST', '/platform/v1/auth/2fa/recovery/regenerate')).codes)
    setPending(null)
    setCode('')
    await onChanged()
  })
  const regenerate = useSubmit(async () => setCodes((await call('POST', '/platform/v1/auth/2fa/recovery/regenerate')).codes))
  const disable = useSubmit(async () => {
    await call('POST', '/platform/v1/auth/2fa/disable', { body: { password, code: code.trim() } })
    setPassword('')
    setCode('')
    setCodes(null)
    await onChanged()
  })
  const codeField = html`<${Field}
    label="Authenticator code"
    name="code"
    inputmode="numeric"
    autocomplete="one-time-code"
    pattern="[0-9]{6}"
    required
    value=${code}
    onValue=${setCode}
  />`
  let body
  if (me.totp_enabled) {
    body = html`<p>Two-factor authentication is <strong>on</strong>.</p>
      ${codes ? html`<${RecoveryCodes} codes=${codes} />` : null}
      <div class="actions">
        <button type="button" onClick=${regenerate.submit} disabled=${regenerate.busy}>New recovery codes</button>
      </div>
      <${ErrorNotice} error=${regenerate.error} />
      <form onSubmit=${disable.submit} aria-label="Turn off two-factor authentication">
        <h3>Turn it off</h3>
        <${Field}
          label="Password"
          type="password"
          name="password"
          autocomplete="current-password"
          required
          value=${password}
          onValue=${setPassword}
        />
        ${codeField}
        <${ErrorNotice} error=${disable.error} />
        <button type="submit" class="danger" disabled=${disable.busy}>Turn off two-factor</button>
      </form>`
  } else if (pending) {
    body = html`<p>Scan this code with your authenticator app, or type the secret, then enter the code it shows.</p>
      <${QrCode} text=${pending.otpauth_uri} />
      <p>Secret: <code data-totp-secret>${pending.secret}</code></p>
      <form onSubmit=${verify.submit} aria-label="Confirm two-factor authentication">
        ${codeField}
        <${ErrorNotice} error=${verify.error} />
        <button type="submit" disabled=${verify.busy}>Turn on two-factor</button>
      </form>`
  } else {
    body = html`<p>Two-factor authentication is <strong>off</strong>. With it on, logging in also asks for a code from an authenticator app.</p>
      <${ErrorNotice} error=${setup.error} />
      <button type="button" onClick=${setup.submit} disabled=${setup.busy}>Set up two-factor</button>`
  }
  return html`<section aria-labelledby="totp-title">
    <h2 id="totp-title">Two-factor authentication</h2>
    ${body}
  </section>`
}

const topics = [
  ['security_notices', 'Security notices', 'Password, 2FA, new sign-ins and API key changes. Always sent.'],
  ['allowance_warnings', 'Allowance warnings', "80 % and 100 % of a project's monthly allowance used."],
  ['overage_charges', 'Overage charges', 'An overage charged at the end of a billing period.'],
  ['alert_emails', 'Alert e-mails', 'Alerts that list your address, firing and resolved.'],
  ['product_news', 'Product news', 'Occasional news about jobsvc.'],
]

function NotificationPreferences() {
  const { data, error, loading, reload } = useLoad(() => call('GET', '/platform/v1/account/notifications'), [])
  const [draft, setDraft] = useState(null)
  const [saved, setSaved] = useState(false)
  const current = draft ?? data
  const save = useSubmit(async () => {
    setSaved(false)
    // security_notices is never sent: the service refuses to turn it off (400 security_notices_required).
    const { security_notices: _required, ...changes } = current
    await call('PATCH', '/platform/v1/account/notifications', { body: changes })
    setDraft(null)
    setSaved(true)
    reload()
  })
  return html`<form onSubmit=${save.submit} aria-labelledby="notifications-title">
    <h2 id="notifications-title">E-mail notifications</h2>
    <${ErrorNotice} error=${error} />
    ${loading && !data ? html`<${Loading} />` : null}
    ${
      current
        ? html`<fieldset class="switches">
            <legend class="visually-hidden">Topics</legend>
            ${topics.map(
              ([key, label, hint]) =>
                html`<label class="check">
                  <input
                    type="checkbox"
                    name=${key}
                    checked=${key === 'security_notices' ? true : current[key]}
                    disabled=${key === 'security_notices'}
                    onChange=${(e) => (setSaved(false), setDraft({ ...current, [key]: e.target.checked }))}
                  />
                  ${label} <span class="muted small">${hint}</span>
                </label>`,
            )}
          </fieldset>`
        : null
    }
    <${ErrorNotice} error=${save.error} />
    <${Saved} when=${saved} />
    <button type="submit" disabled=${save.busy || !current}>Save the preferences</button>
  </form>`
}

/** The export is fetched with the session and handed to the browser as a file. */
function AccountExport() {
  const download = useSubmit(async () => {
    const data = await call('GET', '/platform/v1/account/export')
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' }))
    const link = Object.assign(document.createElement('a'), { href: url, download: 'jobsvc-account-export.json' })
    link.click()
    setTimeout(() => URL.revokeObjectURL(url), 0)
  })
  return html`<section aria-labelledby="export-title">
    <h2 id="export-title">Your data</h2>
    <p>Your profile, projects, teams and activity as JSON (no secrets). One export a minute.</p>
    <${ErrorNotice} error=${download.error} />
    <button type="button" onClick=${download.submit} disabled=${download.busy}>${download.busy ? 'Preparing…' : 'Download my data'}</button>
  </section>`
}

function DeleteAccount({ me, onDeleted }) {
  const [confirm, setConfirm] = useState('')
  const remove = useSubmit(async () => {
    await call('DELETE', '/platform/v1/account', { query: { confirm } })
    await onDeleted()
  })
  return html`<form onSubmit=${remove.submit} aria-labelledby="delete-title">
    <h2 id="delete-title">Delete the account</h2>
    <p>This deletes the projects you own (their API keys stop at once) and removes you from the others. It cannot be undone.</p>
    <${Field}
      label=${`Type your e-mail (${me.email}) to confirm`}
      type="email"
      name="confirm"
      autocomplete="off"
      required
      value=${confirm}
      onValue=${setConfirm}
    />
    <${ErrorNotice} error=${remove.error} />
    <button type="submit" class="danger" disabled=${remove.busy || confirm.trim().toLowerCase() !== me.email.toLowerCase()}>Delete my account</button>
  </form>`
}

export function SettingsPage({ me, onChanged, onDeleted }) {
  return html`<section class="settings" aria-labelledby="settings-title">
    <h1 id="settings-title">Account settings</h1>
    <p class="muted small">Member since ${formatTime(me.created_at)}</p>
    <div class="panels">
      <${ProfileForm} me=${me} onChanged=${onChanged} />
      <${PasswordForm} />
      <${TwoFactor} me=${me} onChanged=${onChanged} />
      <${NotificationPreferences} />
      <${AccountExport} />
      <${DeleteAccount} me=${me} onDeleted=${onDeleted} />
    </div>
  </section>`
}
