// Shared fixtures: every test fails on a browser-side error, and can save screenshots as
// artifacts under end2end/artifacts/.
import { test as base, expect, type Page } from '@playwright/test';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export const artifactsDir = join(__dirname, '..', 'artifacts');

type Fixtures = {
  browserErrors: string[];
  saveScreenshot: (name: string) => Promise<void>;
};

export const test = base.extend<Fixtures>({
  browserErrors: async ({ page }, use) => {
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
    await use(errors);
    expect(errors, 'the browser reported errors').toEqual([]);
  },
  saveScreenshot: async ({ page }, use) => {
    mkdirSync(artifactsDir, { recursive: true });
    await use(async (name: string) => {
      await page.screenshot({ path: join(artifactsDir, `${name}.png`), fullPage: true });
    });
  },
});

/** Waits until the page is hydrated: the root component's browser-only effect has run. */
export async function waitForHydration(page: Page) {
  await expect(page.getByTestId('hydration')).toHaveAttribute('data-hydrated', 'true');
}

/** Signs in through the form (Enter submits it) and waits for the navigation to show `email`. */
export async function signIn(page: Page, email: string, password: string) {
  await page.goto('/sign-in');
  await waitForHydration(page);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByLabel('Password').press('Enter');
  await expect(page.getByTestId('nav-account')).toHaveText(email);
}

export { expect };
