// Every page of the console at a desktop size and at a phone's (390×844): nothing is wider than
// the screen, an axe-core scan finds no serious or critical accessibility violation, and each
// page is photographed into docs/screenshots/ (linked from the README's console section).
import AxeBuilder from '@axe-core/playwright';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  test, expect, signIn, signOut, waitForHydration, serverFn, tenantWithAdmin, unique,
  OPERATOR, OPERATOR_PASSWORD,
} from './fixtures';
import type { Page } from '@playwright/test';

const screenshots = join(__dirname, '..', '..', 'docs', 'screenshots');

const SIZES = [
  { name: 'desktop', width: 1280, height: 800 },
  { name: 'phone', width: 390, height: 844 },
];

/** A page to visit: where, what shows that it is ready, and the status it answers. */
type Visit = { name: string; path: string; ready: string; status?: number };

/** Fails when anything makes the document wider than the screen. */
async function fitsTheScreen(page: Page, what: string) {
  const [wide, screen] = await page.evaluate(() => [
    document.documentElement.scrollWidth, document.documentElement.clientWidth,
  ]);
  expect(wide, `${what} is ${wide} px wide on a ${screen} px screen`).toBeLessThanOrEqual(screen);
}

/** Fails on every serious or critical violation axe-core finds (WCAG 2.1 A and AA rules). */
async function accessible(page: Page, what: string) {
  const results = await new AxeBuilder({ page })
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'])
    .analyze();
  const serious = results.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help}; at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  expect(serious, `${what}: accessibility violations`).toEqual([]);
}

/** Visits each page at each size, checks it and photographs it as `<size>-<name>.png`. */
async function visitAll(page: Page, visits: Visit[]) {
  for (const size of SIZES) {
    await page.setViewportSize({ width: size.width, height: size.height });
    for (const visit of visits) {
      const what = `${visit.name} at ${size.width}×${size.height}`;
      const response = await page.goto(visit.path);
      expect(response!.status(), what).toBe(visit.status ?? 200);
      await waitForHydration(page);
      await expect(page.locator(visit.ready).first(), what).toBeVisible();
      await fitsTheScreen(page, what);
      await accessible(page, what);
      await page.screenshot({ path: join(screenshots, `${size.name}-${visit.name}.png`), fullPage: true });
    }
  }
}

test('every page fits a phone, passes an accessibility scan, and is photographed', async ({ page }) => {
  test.setTimeout(300_000);
  mkdirSync(screenshots, { recursive: true });

  await page.goto('/');
  await waitForHydration(page);
  await visitAll(page, [
    { name: 'home-signed-out', path: '/', ready: 'h1' },
    { name: 'sign-in', path: '/sign-in', ready: 'form' },
  ]);

  // Data for every table: a tenant with a rule, two keys, one of them rotated (a key in its
  // grace period next to its replacement), and the audit events these make.
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('pages'));
  for (const [name, route] of [['payments-per-user', 'POST /payments'], ['search', 'GET /search']]) {
    const [made, said] = await serverFn(page, 'rules/save', {
      tenant: t.id, id: null,
      body: { name, match: 'exact', route, scope: 'subject', algorithm: 'token_bucket', limit: 20, period_ms: 60_000 },
    });
    expect(made, said).toBe(true);
  }
  const key = () => {
    const plaintext = `sl_chk_${randomBytes(32).toString('hex')}`;
    return { hash: createHash('sha256').update(plaintext).digest('hex'), prefix: plaintext.slice(0, 12) };
  };
  const [created, body] = await serverFn(page, 'keys/create', { tenant: t.id, kind: 'check', name: 'payments-service', ...key() });
  expect(created, body).toBe(true);
  const [rotated, said] = await serverFn(page, 'keys/rotate', {
    tenant: t.id, key: JSON.parse(body).id, grace_seconds: 7200, ...key(),
  });
  expect(rotated, said).toBe(true);

  await visitAll(page, [
    { name: 'home', path: '/', ready: 'h1' },
    { name: 'tenants', path: '/tenants', ready: '[data-testid="tenants-table"]' },
    { name: 'users', path: '/users', ready: '[data-testid="users-table"]' },
    { name: 'fleet-dashboard', path: '/dashboard', ready: '.tiles' },
    { name: 'platform-audit', path: '/audit', ready: '[data-testid="audit-table"]' },
    { name: 'account', path: '/account', ready: '[data-testid="sign-out"]' },
  ]);
  await signOut(page);

  await signIn(page, t.email, 'tenant admin password');
  const tenant = `/tenants/${t.id}`;
  await visitAll(page, [
    { name: 'tenant-dashboard', path: `${tenant}/dashboard`, ready: '.tiles' },
    { name: 'rules', path: `${tenant}/rules`, ready: '[data-testid="rules-table"]' },
    { name: 'rules-file', path: `${tenant}/rules/file`, ready: '[data-testid="rules-file"]' },
    { name: 'keys', path: `${tenant}/keys`, ready: '[data-testid="keys-table"]' },
    { name: 'tenant-audit', path: `${tenant}/audit`, ready: '[data-testid="audit-table"]' },
    { name: 'simulate', path: `${tenant}/simulate`, ready: 'form' },
    { name: 'tenant-admins', path: `${tenant}/admins`, ready: '[data-testid="admins-table"]' },
    { name: 'forbidden', path: '/tenants', ready: '[data-testid="forbidden"]', status: 403 },
    { name: 'not-found', path: '/no-such-page', ready: 'h1', status: 404 },
  ]);
});

test('on a phone the header folds its links into a menu that opens, fits, and closes with Escape', async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  await page.goto('/tenants');
  await waitForHydration(page);
  const menu = page.getByRole('button', { name: 'Menu' });
  const account = page.getByTestId('nav-account');
  await expect(menu).toBeVisible();
  await expect(menu).toHaveAttribute('aria-expanded', 'false');
  await expect(account).toBeHidden();

  await menu.click();
  await expect(menu).toHaveAttribute('aria-expanded', 'true');
  await expect(account).toBeVisible();
  for (const link of await page.locator('header nav a').all()) {
    const box = (await link.boundingBox())!;
    expect(box.x, `${await link.textContent()} starts on screen`).toBeGreaterThanOrEqual(0);
    expect(box.x + box.width, `${await link.textContent()} ends on screen`).toBeLessThanOrEqual(390);
  }
  await fitsTheScreen(page, 'the open menu');
  await page.keyboard.press('Escape');
  await expect(menu).toHaveAttribute('aria-expanded', 'false');
  await expect(account).toBeHidden();
  await expect(menu).toBeFocused();

  // Following a link closes the menu on the next page.
  await menu.click();
  await page.locator('header nav').getByRole('link', { name: 'Audit log' }).click();
  await expect(page).toHaveURL(/\/audit$/);
  await expect(account).toBeHidden();

  // On a desktop the links are simply there, and there is no menu button.
  await page.setViewportSize({ width: 1280, height: 800 });
  await expect(account).toBeVisible();
  await expect(menu).toBeHidden();
});
