import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { call } from './api.js'
import { timeZone } from './format.js'
import { AcceptInvitePage, ForgotPage, LoginPage, ResetPasswordPage, SignupPage, VerifyPage } from './pages/account.js'
import { ActivityPage } from './pages/activity.js'
import { AlertsPage } from './pages/alerts.js'
import { ApiKeyPage } from './pages/api-key.js'
import { BillingPage } from './pages/billing.js'
import { EventsPage } from './pages/events.js'
import { WorkersPage } from './pages/workers.js'
import { JobPage, JobsPage } from './pages/jobs.js'
import { OverviewPage } from './pages/overview.js'
import { QueuePage } from './pages/queue.js'
import { RecurringPage } from './pages/recurring.js'
import { SettingsPage } from './pages/settings.js'
import { TeamPage } from './pages/team.js'
import { WebhookPage, WebhooksPage } from './pages/webhooks.js'
import { ErrorNotice, html, Link, Loading, navigate } from './ui.js'

/** The page path under /dashboard, without the prefix. */
const currentPath = () => location.pathname.replace(/^\/dashboard/, '') || '/'

/** Pages anyone may open; the rest need a session. */
const publicPages = {
  '/login': LoginPage,
  '/signup': SignupPage,
  '/verify': VerifyPage,
  '/forgot': ForgotPage,
  '/reset-password': ResetPasswordPage,
}

function usePath() {
  const [path, setPath] = useState(currentPath)
  useEffect(() => {
    const onChange = () => {
      setPath(currentPath())
      scrollTo(0, 0)
    }
    addEventListener('popstate', onChange)
    return () => removeEventListener('popstate', onChange)
  }, [])
  return path
}

/** Moves to `to` once rendered (navigating during a render would update the app mid-render). */
function Redirect({ to }) {
  useEffect(() => navigate(to, { replace: true }), [to])
  return html`<${Loading} />`
}

function ProjectSwitcher({ projects, current, section }) {
  if (projects.length < 2) return html`<span class="project-name">${current.name}</span>`
  return html`<label class="switcher"
    ><span class="visually-hidden">Project</span>
    <select name="project" value=${current.id} onChange=${(e) => navigate(`/projects/${e.target.value}${section}`)}>
      ${projects.map((p) => html`<option value=${p.id}>${p.name} (${p.role})</option>`)}
    </select></label
  >`
}

function Shell({ me, projects, project, section, onLogout, children }) {
  const nav = [
    ['', 'Overview'],
    ['/jobs', 'Jobs'],
    ['/workers', 'Workers'],
    ['/recurring', 'Schedules'],
    ['/alerts', 'Alerts'],
    ['/webhooks', 'Webhooks'],
    ['/activity', 'Activity'],
    ['/events', 'Events'],
    ['/team', 'Team'],
    ['/billing', 'Billing'],
    ['/api-key', 'API key'],
  ]
  const isCurrent = (to) => section === to || (to !== '' && section.startsWith(`${to}/`))
  return html`<a class="skip" href="#content">Skip to content</a>
    <header class="top">
      <${Link} to="/" class="brand">jobsvc</${Link}>
      ${project ? html`<${ProjectSwitcher} projects=${projects} current=${project} section=${section} />` : null}
      <nav aria-label="Project">
        ${
          project
            ? nav.map(
                ([to, label]) =>
                  html`<${Link} to=${`/projects/${project.id}${to}`} aria-current=${isCurrent(to) ? 'page' : undefined}
                  >${label}</${Link}
                >`,
              )
            : null
        }
      </nav>
      <${Link} to="/settings" class="who" aria-current=${section === '/settings' ? 'page' : undefined}>${me.display_name ?? me.email}</${Link}>
      <button type="button" class="link" onClick=${onLogout}>Log out</button>
    </header>
    <main id="content" tabindex="-1">${children}</main>
    <footer class="muted small">Times shown in ${timeZone}.</footer>`
}

function ProjectPages({ me, projects, path, onLogout, reloadProjects }) {
  const match = /^\/projects\/([^/]+)(\/.*)?$/.exec(path)
  if (!match) {
    if (projects.length > 0) return html`<${Redirect} to=${`/projects/${projects[0].id}`} />`
    return html`<${Shell} me=${me} projects=${projects} section="" onLogout=${onLogout}><p class="empty">You are not a member of any project yet.</p></${Shell}>`
  }
  const [, projectId, rest = ''] = match
  const project = projects.find((p) => p.id === projectId)
  const section = rest
  let page
  if (!project)
    page = html`<${ErrorNotice} error=${{ message: 'This project does not exist or you are not a member of it.', code: 'project_not_found' }} />`
  else if (section === '') page = html`<${OverviewPage} project=${project} />`
  else if (section === '/jobs') page = html`<${JobsPage} project=${project} />`
  else if (section.startsWith('/jobs/')) page = html`<${JobPage} project=${project} jobId=${decodeURIComponent(section.slice(6))} />`
  else if (section.startsWith('/queues/')) page = html`<${QueuePage} project=${project} queue=${decodeURIComponent(section.slice(8))} />`
  else if (section === '/workers') page = html`<${WorkersPage} project=${project} />`
  else if (section === '/recurring') page = html`<${RecurringPage} project=${project} />`
  else if (section === '/alerts') page = html`<${AlertsPage} project=${project} />`
  else if (section === '/webhooks') page = html`<${WebhooksPage} project=${project} />`
  else if (section.startsWith('/webhooks/')) page = html`<${WebhookPage} project=${project} webhookId=${decodeURIComponent(section.slice(10))} />`
  else if (section === '/activity') page = html`<${ActivityPage} project=${project} />`
  // Keyed by project: a tail's cursor belongs to its project, so switching projects starts a new one.
  else if (section === '/events') page = html`<${EventsPage} key=${project.id} project=${project} />`
  else if (section === '/team') page = html`<${TeamPage} project=${project} me=${me} onProjectChanged=${reloadProjects} />`
  else if (section === '/billing') page = html`<${BillingPage} project=${project} />`
  else if (section === '/api-key') page = html`<${ApiKeyPage} project=${project} onProjectChanged=${reloadProjects} />`
  else page = html`<p class="empty">No such page.</p>`
  return html`<${Shell} me=${me} projects=${projects} project=${project} section=${section} onLogout=${onLogout}>${page}</${Shell}>`
}

function App() {
  const path = usePath()
  // undefined: not asked yet; null: no session.
  const [session, setSession] = useState(undefined)
  const [error, setError] = useState(null)
  const loadSession = async () => {
    try {
      const [me, projects] = await Promise.all([call('GET', '/platform/v1/auth/me'), call('GET', '/platform/v1/projects')])
      setSession({ me, projects: projects.data })
    } catch (err) {
      if (err.status === 401 || err.status === 404) setSession(null)
      else setError(err)
    }
  }
  const reloadProjects = async () => {
    const projects = await call('GET', '/platform/v1/projects')
    setSession((s) => ({ ...s, projects: projects.data }))
  }
  useEffect(() => {
    loadSession()
  }, [])
  const logout = async () => {
    await call('POST', '/platform/v1/auth/logout').catch(() => {})
    setSession(null)
    navigate('/login')
  }
  const Public = publicPages[path]
  if (Public) return html`<${Public} onLoggedIn=${loadSession} />`
  if (error) return html`<main class="account-card"><${ErrorNotice} error=${error} /></main>`
  if (session === undefined) return html`<${Loading} />`
  if (session === null) return html`<${Redirect} to=${`/login?next=${encodeURIComponent(path + location.search)}`} />`
  if (path === '/accept-invite') return html`<${AcceptInvitePage} onJoined=${reloadProjects} />`
  if (path === '/settings') {
    const onDeleted = () => {
      setSession(null)
      navigate('/login')
    }
    return html`<${Shell} me=${session.me} projects=${session.projects} section="/settings" onLogout=${logout}>
      <${SettingsPage} me=${session.me} onChanged=${loadSession} onDeleted=${onDeleted} />
    </${Shell}>`
  }
  return html`<${ProjectPages} me=${session.me} projects=${session.projects} path=${path} onLogout=${logout} reloadProjects=${reloadProjects} />`
}

// Preact 11 keeps the container's existing children: the static "Loading…" goes first.
const root = document.getElementById('app')
root.replaceChildren()
render(html`<${App} />`, root)
