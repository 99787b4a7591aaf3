import { useEffect, useState } from 'preact/hooks'
import { call } from '../api.js'
import { ErrorNotice, html, Link, Loading, navigate, useSubmit } from '../ui.js'

const tokenFromLocation = () => new URLSearchParams(location.search).get('token') ?? ''

function AccountCard({ title, children }) {
  return html`<main class="account-card">
    <h1>${title}</h1>
    ${children}
  </main>`
}

/** A labelled input; `onValue` receives what the user typed. */
export function Field({ label, onValue, ...input }) {
  return html`<label class="field">
    <span>${label}</span>
    <input ...${input} onInput=${(e) => onValue(e.target.value)} />
  </label>`
}

/** A new password as the reset and change routes take it (10 to 128 characters). */
export const NewPasswordField = ({ value, onValue }) =>
  html`<${Field}
    label="New password (10 to 128 characters)"
    type="password"
    name="new_password"
    autocomplete="new-password"
    minlength="10"
    maxlength="128"
    required
    value=${value}
    onValue=${onValue}
  />`

/** The address and password of a log-in, or of a new account (whose password rules are shown). */
function Credentials({ isNewAccount = false, email, setEmail, password, setPassword }) {
  return html`<${Field}
      label="E-mail"
      type="email"
      name="email"
      autocomplete=${isNewAccount ? 'email' : 'username'}
      required
      value=${email}
      onValue=${setEmail}
    />
    <${Field}
      label=${isNewAccount ? 'Password (8 to 128 characters)' : 'Password'}
      type="password"
      name="password"
      autocomplete=${isNewAccount ? 'new-password' : 'current-password'}
      minlength=${isNewAccount ? 8 : undefined}
      maxlength="128"
      required
      value=${password}
      onValue=${setPassword}
    />`
}

/** Where to go after logging in: the page that sent the user here, or the projects. */
const nextPath = () => {
  const next = new URLSearchParams(location.search).get('next')
  return next && next.startsWith('/') && !next.startsWith('//') ? next : '/'
}

export function LoginPage({ onLoggedIn }) {
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [secondFactor, setSecondFactor] = useState(null)
  const [code, setCode] = useState('')
  const { busy, error, submit } = useSubmit(async () => {
    const body = { email, password }
    if (secondFactor === 'totp') body.totp_code = code.trim()
    if (secondFactor === 'recovery') body.recovery_code = code.trim()
    try {
      await call('POST', '/platform/v1/auth/login', { body })
    } catch (err) {
      // The password was right; the account asks for its second factor.
      if (err.code === 'totp_required' && secondFactor === null) return setSecondFactor('totp')
      throw err
    }
    await onLoggedIn()
    navigate(nextPath(), { replace: true })
  })
  return html`<${AccountCard} title="Log in">
    <form onSubmit=${submit}>
      <${Credentials} email=${email} setEmail=${setEmail} password=${password} setPassword=${setPassword} />
      ${
        secondFactor === 'totp' &&
        html`<${Field}
            label="Authenticator code"
            name="totp_code"
            inputmode="numeric"
            autocomplete="one-time-code"
            pattern="[0-9]{6}"
            required
            autofocus
            value=${code}
            onValue=${setCode}
          />
          <button type="button" class="link" onClick=${() => (setSecondFactor('recovery'), setCode(''))}>Use a recovery code instead</button>`
      }
      ${
        secondFactor === 'recovery' &&
        html`<${Field} label="Recovery code" name="recovery_code" placeholder="xxxx-xxxx" required autofocus value=${code} onValue=${setCode} />
          <button type="button" class="link" onClick=${() => (setSecondFactor('totp'), setCode(''))}>Use an authenticator code instead</button>`
      }
      <${ErrorNotice} error=${error} />
      <button type="submit" disabled=${busy}>${busy ? 'Logging in…' : 'Log in'}</button>
    </form>
    <p class="muted"><${Link} to="/forgot">Forgot your password?</${Link}> · <${Link} to="/signup">Create an account</${Link}></p>
  </${AccountCard}>`
}

export function SignupPage() {
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [acceptTerms, setAcceptTerms] = useState(false)
  const [sentTo, setSentTo] = useState(null)
  const { busy, error, submit } = useSubmit(async () => {
    await call('POST', '/platform/v1/auth/signup', { body: { email, password, accept_terms: acceptTerms } })
    setSentTo(email)
  })
  if (sentTo !== null) {
    return html`<${AccountCard} title="Check your e-mail">
      <p role="status">We sent a verification link to <strong>${sentTo}</strong>. Open it within 24 hours to create your first project.</p>
    </${AccountCard}>`
  }
  return html`<${AccountCard} title="Create an account">
    <form onSubmit=${submit}>
      <${Credentials} isNewAccount email=${email} setEmail=${setEmail} password=${password} setPassword=${setPassword} />
      <label class="check"><input type="checkbox" name="accept_terms" checked=${acceptTerms} onChange=${(e) => setAcceptTerms(e.target.checked)} /> I accept the terms of service</label>
      <${ErrorNotice} error=${error} />
      <button type="submit" disabled=${busy}>${busy ? 'Signing up…' : 'Sign up'}</button>
    </form>
    <p class="muted">Already have an account? <${Link} to="/login">Log in</${Link}></p>
  </${AccountCard}>`
}

export function VerifyPage() {
  const [result, setResult] = useState(null)
  const [error, setError] = useState(null)
  useEffect(() => {
    call('POST', '/platform/v1/auth/verify', { body: { token: tokenFromLocation() } }).then(setResult, setError)
  }, [])
  if (error) {
    return html`<${AccountCard} title="Verification failed">
      <${ErrorNotice} error=${error} />
      <p><${Link} to="/login">Log in</${Link}> to have a new link sent, or <${Link} to="/signup">sign up again</${Link}>.</p>
    </${AccountCard}>`
  }
  if (!result) return html`<${AccountCard} title="Verifying your address"><${Loading} what="Verifying" /></${AccountCard}>`
  return html`<${AccountCard} title="Your address is verified">
    <p role="status">Your project <strong>${result.project_name}</strong> is ready. Its API key, shown only this once:</p>
    <${SecretOnce} value=${result.api_key} />
    <p><${Link} to="/login" class="button">Log in</${Link}></p>
  </${AccountCard}>`
}

/** A secret the service shows once (API key): selectable, copyable, never stored by the page. */
export function SecretOnce({ value }) {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    await navigator.clipboard?.writeText(value).then(
      () => setCopied(true),
      () => setCopied(false),
    )
  }
  return html`<div class="secret">
    <code data-secret>${value}</code>
    <button type="button" onClick=${copy}>${copied ? 'Copied' : 'Copy'}</button>
    <p class="muted small">Store it now: it will not be shown again.</p>
  </div>`
}

export function ForgotPage() {
  const [email, setEmail] = useState('')
  const [message, setMessage] = useState(null)
  const { busy, error, submit } = useSubmit(async () => {
    setMessage((await call('POST', '/platform/v1/auth/forgot', { body: { email } })).message)
  })
  return html`<${AccountCard} title="Reset your password">
    ${
      message
        ? html`<p role="status">${message}</p>`
        : html`<form onSubmit=${submit}>
            <${Field} label="E-mail" type="email" name="email" autocomplete="email" required value=${email} onValue=${setEmail} />
            <${ErrorNotice} error=${error} />
            <button type="submit" disabled=${busy}>Send a reset link</button>
          </form>`
    }
    <p class="muted"><${Link} to="/login">Back to log in</${Link}></p>
  </${AccountCard}>`
}

export function ResetPasswordPage() {
  const [password, setPassword] = useState('')
  const [message, setMessage] = useState(null)
  const { busy, error, submit } = useSubmit(async () => {
    setMessage((await call('POST', '/platform/v1/auth/reset', { body: { token: tokenFromLocation(), new_password: password } })).message)
  })
  return html`<${AccountCard} title="Choose a new password">
    ${
      message
        ? html`<p role="status">${message}</p>
          <p><${Link} to="/login" class="button">Log in</${Link}></p>`
        : html`<form onSubmit=${submit}>
            <${NewPasswordField} value=${password} onValue=${setPassword} />
            <${ErrorNotice} error=${error} />
            <button type="submit" disabled=${busy}>Set the password</button>
          </form>`
    }
  </${AccountCard}>`
}

/** Reached from the invitation e-mail; the app sends a visitor without a session to log in first. */
export function AcceptInvitePage({ onJoined }) {
  const { busy, error, submit } = useSubmit(async () => {
    const project = await call('POST', '/platform/v1/invites/accept', { body: { token: tokenFromLocation() } })
    await onJoined()
    navigate(`/projects/${project.id}`, { replace: true })
  })
  return html`<${AccountCard} title="Join a project">
    <p>You were invited to a project. Accept to see its jobs with the role you were given.</p>
    <${ErrorNotice} error=${error} />
    <button type="button" onClick=${submit} disabled=${busy}>Accept the invitation</button>
  </${AccountCard}>`
}
