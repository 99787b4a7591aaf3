import { existsSync } from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import type { TestLike } from './harness.ts'

/** Debian's chromium package (`.ci/run` installs it when missing). */
export const chromiumPath = '/usr/bin/chromium'

export const hasChromium = () => existsSync(chromiumPath)

/** Headless Chromium for one test file, closed by its teardown. */
export async function launchChromium(t: TestLike): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  t.teardown(() => browser.close())
  return browser
}
