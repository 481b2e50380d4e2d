// Playwright drives Debian's Chromium (no browser download). The server under test is the
// build that `cargo leptos build --release --split` produced (SLUICE_E2E_PROFILE=debug for one of `cargo leptos build --split`), started here on its own port with a fresh
// data directory, so a developer's running instance is never touched.
import { defineConfig } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const port = Number(process.env.SLUICE_E2E_PORT ?? 3137);
// Workers load this file again: they inherit the runner's directory through the environment,
// so that tests can read the server's SQLite file (tests/console.spec.ts checks stored hashes).
const dataDir = process.env.SLUICE_E2E_DATA_DIR ?? mkdtempSync(join(tmpdir(), 'sluice-e2e-'));
process.env.SLUICE_E2E_DATA_DIR = dataDir;
const profile = process.env.SLUICE_E2E_PROFILE ?? 'release';

export default defineConfig({
  testDir: './tests',
  outputDir: './test-results',
  timeout: 120_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    },
  },
  webServer: {
    command: `target/${profile}/sluice`,
    cwd: '..',
    url: `http://127.0.0.1:${port}/healthz`,
    reuseExistingServer: false,
    timeout: 60_000,
    stdout: 'pipe',
    env: {
      SLUICE_LISTEN: `127.0.0.1:${port}`,
      SLUICE_DATA_DIR: dataDir,
      LEPTOS_SITE_ROOT: 'target/site',
      RUST_LOG: 'warn',
      // The first start creates admin@localhost with this password (see tests/auth.spec.ts).
      SLUICE_ADMIN_PASSWORD: 'e2e operator password',
      // Each test sends its own X-Forwarded-For (tests/fixtures.ts), so each has its own
      // sign-in budgets.
      SLUICE_TRUSTED_PROXIES: '127.0.0.1',
    },
  },
});
