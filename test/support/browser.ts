import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'
import { repoRoot, type TestLike } from './harness.ts'

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

/** A page in a context of its own (a desktop viewport, Paris time, British English), closed by the teardown. */
export async function newBrowserPage(t: TestLike, browser: Browser): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'Europe/Paris', locale: 'en-GB' })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

/**
 * Where a test file writes its screenshots: the README's docs/screenshots only with
 * JOBSVC_UPDATE_SCREENSHOTS=1, otherwise a temporary folder its teardown removes, so that a test
 * run leaves the tree clean.
 */
export function screenshotFolder(t: TestLike): string {
  if (process.env.JOBSVC_UPDATE_SCREENSHOTS === '1') {
    const folder = join(repoRoot, 'docs', 'screenshots')
    mkdirSync(folder, { recursive: true })
    return folder
  }
  const folder = mkdtempSync(join(tmpdir(), 'jobsvc-screenshots-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  return folder
}
