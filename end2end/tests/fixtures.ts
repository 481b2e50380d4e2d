// Shared fixtures: every test fails on a browser-side error, and can save screenshots as
// artifacts under end2end/artifacts/.
import { test as base, expect, type Locator, type Page } from '@playwright/test';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export const artifactsDir = join(__dirname, '..', 'artifacts');

type Fixtures = {
  browserErrors: string[];
  saveScreenshot: (name: string) => Promise<void>;
};

export const test = base.extend<Fixtures>({
  // Each test is a client of its own: the server (started with SLUICE_TRUSTED_PROXIES naming
  // 127.0.0.1, playwright.config.ts) reads the client's address from X-Forwarded-For, so the
  // sign-in budgets per email and client and per client (10 and 30 a minute) are each test's
  // own. With one shared address, a fast run signed the operator in more than 10 times a
  // minute and got 429 (a clean-clone CI run at dcff628). As an option, the header also goes
  // with the contexts a test opens itself (browser.newContext()).
  extraHTTPHeaders: async ({}, use) => {
    const [a, b, c] = randomBytes(3);
    await use({ 'x-forwarded-for': `10.${a}.${b}.${c}` });
  },
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

/** Waits until the page is hydrated: the browser-only effect of the route's own view has run
 * (`mark_live` in app/src/root.rs). */
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

/** The operator the test server creates on its first start (see playwright.config.ts). */
export const OPERATOR = 'admin@localhost';
export const OPERATOR_PASSWORD = 'e2e operator password';
/** The password of every tenant admin these tests add. */
export const ADMIN_PASSWORD = 'tenant admin password';

/** A name no other test (or earlier run against the same server) uses. */
export const unique = (name: string) => `${name}-${randomBytes(3).toString('hex')}`;

export async function signOut(page: Page) {
  await page.goto('/account');
  await waitForHydration(page);
  await page.getByTestId('sign-out').click();
  await expect(page).toHaveURL(/\/sign-in$/);
}

/** Calls a JSON server function with the page's session, as the page's own script would: from
 * its origin (the server refuses calls whose Origin is another site's). [ok, body]. Some calls
 * here are meant to fail, so they go through the page's request context rather than its
 * fetch, which would log each refusal as a browser error. */
export async function serverFn(page: Page, endpoint: string, args: object): Promise<[boolean, string]> {
  const origin = new URL(page.url()).origin;
  const response = await page.request.post(`/api/${endpoint}`, { data: args, headers: { origin } });
  return [response.ok(), await response.text()];
}

/** As the signed-in operator: a tenant and its admin, through the server functions. */
export async function tenantWithAdmin(page: Page, name: string): Promise<{ id: string; email: string }> {
  const [ok, body] = await serverFn(page, 'tenants/create', { name });
  expect(ok, body).toBe(true);
  const id = JSON.parse(body).id as string;
  const email = `${name}@example.com`;
  const [added, said] = await serverFn(page, 'tenants/add_admin', { tenant: id, email, password: ADMIN_PASSWORD });
  expect(added, said).toBe(true);
  return { id, email };
}

/** A new tenant and its admin, made by the operator; then signed in as that admin. */
export async function signedInAsNewTenantAdmin(page: Page, name: string): Promise<{ id: string; email: string }> {
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique(name));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  return t;
}

/** Presses Tab (Shift+Tab when `back`) until `target` has the focus; fails after `most` presses. */
export async function tabTo(page: Page, target: Locator, most: number, back = false) {
  for (let n = 0; n < most; n++) {
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
    if (await target.evaluate((el) => el === document.activeElement)) return;
  }
  throw new Error(`${target} is not reached in ${most} presses of ${back ? 'Shift+Tab' : 'Tab'}`);
}

export { expect };
