import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { httpRequest, installEnv, repoRoot } from '../support/harness.ts'
import { freshEmail, sessionFrom, startPlatformHarness } from '../support/platform.ts'
import { tokenFromMail } from '../support/smtp-sink.ts'
import { runCli } from '../support/spawned-install.ts'

const run = promisify(execFile)

t.test('the operator command line opens accounts and suspends users', async (t) => {
  const h = await startPlatformHarness(t, import.meta.filename)
  const cli = (...args: string[]) => runCli({ ...installEnv(h.config), LOG_LEVEL: 'silent' }, args)
  const email = freshEmail('owner')

  const created = await cli('project', 'create', '--name', 'ops', '--plan', 'pro', '--email', email, '--env', 'live')
  t.match(created, { project_id: /^prj_/, api_key: /^sv_live_sk_[0-9a-f]{32}$/, owner_user_id: /^usr_/ })
  t.equal((await httpRequest(h.url, created.api_key!, 'GET', '/jobsvc/v1/jobs')).status, 200, 'the key works')

  await t.test('the owner is verified and sets a password through "forgot password"', async (t) => {
    t.equal((await h.platform('POST', '/platform/v1/auth/forgot', { email })).status, 200)
    const token = tokenFromMail(await h.smtp.next(email, /reset/i))
    t.equal((await h.platform('POST', '/platform/v1/auth/reset', { token, new_password: 'a-new-password-1' })).status, 200)
    const login = await h.platform('POST', '/platform/v1/auth/login', { email, password: 'a-new-password-1' })
    t.equal(login.status, 200, JSON.stringify(login.body))
    t.same(login.body.projects, [{ id: created.project_id, name: 'ops', plan: 'pro', api_key_prefix: created.api_key!.slice(0, 24) }])
    const second = await cli('project', 'create', '--name', 'ops-2', '--email', email)
    t.equal(second.owner_user_id, created.owner_user_id, 'an existing user is reused')
  })

  await t.test('a suspended user cannot log in and loses open sessions; reinstating restores both', async (t) => {
    const session = sessionFrom(await h.platform('POST', '/platform/v1/auth/login', { email, password: 'a-new-password-1' }))
    t.same(await cli('user', 'suspend', '--email', email), { user_id: created.owner_user_id, status: 'suspended' })
    const refused = await h.platform('POST', '/platform/v1/auth/login', { email, password: 'a-new-password-1' })
    t.equal(refused.status, 403)
    t.equal(refused.body.error.code, 'account_suspended')
    t.equal(
      (await h.platform('POST', '/platform/v1/auth/login', { email, password: 'wrong-password-1' })).body.error.code,
      'invalid_credentials',
      'the password is checked first',
    )
    t.equal((await h.platform('GET', '/platform/v1/auth/me', undefined, { jwt: session })).status, 401)
    t.same(await cli('user', 'reinstate', '--email', email), { user_id: created.owner_user_id, status: 'active' })
    t.equal((await h.platform('POST', '/platform/v1/auth/login', { email, password: 'a-new-password-1' })).status, 200)
  })

  await t.test('staff status is given and taken only here', async (t) => {
    const login = await h.platform('POST', '/platform/v1/auth/login', { email, password: 'a-new-password-1' })
    const me = () => h.platform('GET', '/platform/v1/auth/me', undefined, { jwt: sessionFrom(login) })
    t.same(await cli('user', 'admin', '--email', email), { user_id: created.owner_user_id, is_admin: true })
    t.equal((await me()).body.is_admin, true)
    t.equal((await h.platform('GET', `/platform/v1/admin/projects/${created.project_id}`, undefined, { jwt: sessionFrom(login) })).status, 200)
    t.same(await cli('user', 'unadmin', '--email', email), { user_id: created.owner_user_id, is_admin: false })
    t.equal((await me()).body.is_admin, false)
  })

  await t.test('bad arguments exit with 2 and a usage line', async (t) => {
    const failed = await run(process.execPath, ['--import', 'tsx', 'services/roles/cli.ts', 'user', 'suspend'], { cwd: repoRoot }).catch(
      (e: { code: number; stderr: string }) => e,
    )
    t.match(failed, { code: 2, stderr: /--email is required/ })
  })
})
