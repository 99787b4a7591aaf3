import { execFile } from 'node:child_process'
import { readFile, rm, writeFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { installEnv, repoRoot, startHarness } from '../support/harness.ts'
import { freePort } from './support.ts'

// The SDK README's five-minute example and the README's worker quick starts, run as written
// against a real service.
const receiverPort = await freePort()
const h = await startHarness(t, import.meta.filename, {
  roles: ['api', 'projector', 'scheduler', 'dispatcher'],
  config: { webhookAllowHosts: [`127.0.0.1:${receiverPort}`] },
})
const env = { ...process.env, JOBSVC_URL: h.url, JOBSVC_API_KEY: h.apiKey, RECEIVER_PORT: String(receiverPort), PYTHONPATH: `${repoRoot}sdk/python` }

/** The fenced code blocks of `language` in a Markdown file. */
async function codeBlocks(file: string, language: string): Promise<string[]> {
  const text = await readFile(new URL(file, `file://${repoRoot}`), 'utf8')
  return [...text.matchAll(new RegExp('```' + language + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!)
}

/** Runs `code` from a file beside the SDK (so `@jobsvc/sdk` resolves); `whileRunning` acts on the process. */
async function runScript(t: Test, name: string, code: string, command: string[], whileRunning?: (pid: number) => Promise<void>) {
  const path = fileURLToPath(new URL(`sdk/${name}`, `file://${repoRoot}`))
  await writeFile(path, code)
  t.teardown(() => rm(path, { force: true }))
  return new Promise<{ code: number; output: string }>((resolve) => {
    const child = execFile(command[0]!, [...command.slice(1), path], { cwd: repoRoot, env, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    )
    void whileRunning?.(child.pid!)
  })
}
t.test('the five-minute example: receiver, worker and producer', async (t) => {
  const [example] = await codeBlocks('sdk/typescript/README.md', 'ts')
  const { code, output } = await runScript(t, '.readme-example.ts', example!, [process.execPath, '--import', 'tsx'])
  t.equal(code, 0, `it ran to its end${code === 0 ? '' : `:\n${output}`}`)
  t.match(output, /processing 0\.5/, 'the progress stream showed the reported progress')
  t.match(output, /^succeeded/m, 'and the job’s success')
  t.match(output, /webhook received for job_\w+/, 'the verified webhook arrived')
})

/** Runs a README quick-start worker until the job it was given succeeded, then sends it SIGTERM. */
async function quickStart(t: Test, language: 'ts' | 'python', name: string, command: string[]) {
  const blocks = await codeBlocks('README.md', language)
  const worker = blocks.find((b) => b.includes('Worker'))!
  const created = await h.request('POST', '/jobsvc/v1/jobs', { job_type: 'send-email', queue: 'emails', payload: { to: 'ada@example.com' } })
  const { code, output } = await runScript(t, name, worker, command, async (pid) => {
    for (;;) {
      const job = await h.request('GET', `/jobsvc/v1/jobs/${created.body.id}`)
      if (job.body.state === 'succeeded') break
      await new Promise((r) => setTimeout(r, 50))
    }
    process.kill(pid, 'SIGTERM')
  })
  t.equal(code, 0, `the worker ran the job and stopped on SIGTERM${code === 0 ? '' : `:\n${output}`}`)
}

t.test('the README quick start’s TypeScript worker', (t) => quickStart(t, 'ts', '.readme-worker.ts', [process.execPath, '--import', 'tsx']))
t.test('the README quick start’s Python worker', (t) => quickStart(t, 'python', '.readme-worker.py', ['python3']))

t.test('the README quick start’s shell steps: a project, a job, its poll and its ack with a result', async (t) => {
  const blocks = await codeBlocks('README.md', 'sh')
  const steps = blocks.find((b) => b.includes('project create --name demo'))!
  const script = steps.replaceAll('localhost:8080', new URL(h.url).host)
  const output = await new Promise<string>((resolve, reject) =>
    execFile(
      'bash',
      ['-euo', 'pipefail', '-c', script],
      { cwd: repoRoot, env: { ...env, ...installEnv(h.config) }, timeout: 60_000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${String(err)}\n${stdout}${stderr}`)) : resolve(stdout)),
    ),
  )
  t.match(output, /"state":"succeeded"/, 'the job ran through poll and ack')
  t.match(output, /"result":\{"sent":true\}/, 'and shows the ack’s result')
})
