// Fault injection for test/platform/role-thread-restart.test.ts. A spawned service loads it into
// each of its threads with `--import` (NODE_OPTIONS); in the background-roles thread it throws an
// uncaught exception once the test creates `<JOBSVC_TEST_CRASH_DIR>/crash`, and only once (it
// leaves `crashed` beside it), so the thread started again runs on.
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { isMainThread, workerData } from 'node:worker_threads'

const dir = process.env.JOBSVC_TEST_CRASH_DIR
if (!isMainThread && workerData?.roleThread === true && dir) {
  const timer = setInterval(() => {
    if (!existsSync(join(dir, 'crash')) || existsSync(join(dir, 'crashed'))) return
    writeFileSync(join(dir, 'crashed'), '')
    clearInterval(timer)
    throw new Error('a crash injected by the test')
  }, 100)
  timer.unref()
}
