import { spawn } from 'node:child_process'
import { installEnv, repoRoot, type Harness } from './harness.ts'

/** Runs `npm run replay`'s script with `args` in its own process, as an operator would, against the harness's install. */
export function runReplay(h: Pick<Harness, 'config'>, args: string[] = []): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/roles/replay.ts', ...args], {
      cwd: repoRoot,
      env: { ...process.env, ...installEnv(h.config), LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (d) => (output += String(d)))
    child.stderr.on('data', (d) => (output += String(d)))
    // A safety bound only: a replay that never gets the projector's lock would otherwise hang the file.
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000)
    child.once('error', reject)
    child.once('exit', (code) => {
      clearTimeout(timer)
      resolve({ code, output })
    })
  })
}
