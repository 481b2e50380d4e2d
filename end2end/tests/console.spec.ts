// The admin console end to end, in headless Chromium against the release build: a tenant
// admin's whole flow, keys that never leave the browser in plaintext, admin keys, tenant
// isolation (UI and direct server-function calls), and suspension with its audit trail.
import { createHash } from 'node:crypto';
import { execFileSync, execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  test, expect, signIn, signOut, waitForHydration, serverFn, tenantWithAdmin, unique, signedInAsNewTenantAdmin,
  OPERATOR, OPERATOR_PASSWORD, ADMIN_PASSWORD,
} from './fixtures';
import type { APIRequestContext, Page, Request } from '@playwright/test';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

async function check(request: APIRequestContext, key: string, route: string): Promise<number> {
  const response = await request.post('/v1/check', { headers: { 'X-API-Key': key }, data: { route } });
  return response.status();
}

/** The hash the server stored for the key with this display prefix (read from its SQLite file). */
function storedHash(prefix: string): string {
  const db = join(process.env.SLUICE_E2E_DATA_DIR!, 'sluice.db');
  const script = 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); ' +
    'print(c.execute("SELECT hash FROM api_keys WHERE prefix = ?", (sys.argv[2],)).fetchone()[0])';
  return execFileSync('python3', ['-c', script, db, prefix]).toString().trim();
}

/**
 * Generates a key on the keys page and returns the plaintext the page shows once; then says it
 * is stored (the page asks before leaving while a key is shown), unless `keep`.
 */
async function generateKey(page: Page, kind: 'check' | 'admin', name: string, keep = false): Promise<string> {
  await page.getByLabel('Kind').selectOption(kind);
  await page.getByLabel('Name').fill(name);
  await page.getByTestId('create-key').click();
  const shown = page.getByTestId('new-key-value');
  await expect(shown).toHaveText(new RegExp(`^sl_${kind === 'check' ? 'chk' : 'adm'}_[0-9a-f]{64}$`));
  const key = (await shown.textContent())!;
  if (!keep) {
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await expect(page.getByTestId('new-key')).toHaveCount(0);
  }
  return key;
}

test('a tenant admin: rule, check key to 429, rotation with grace, revocation, admin key', async ({
  page, browser, browserErrors, saveScreenshot, request,
}) => {
  void browserErrors;
  // The operator creates the tenant and its admin in the UI.
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  await expect(page).toHaveURL(/\/tenants$/);
  const tenantName = unique('acme');
  await page.getByLabel('Name').fill(tenantName);
  await page.getByRole('button', { name: 'Create tenant' }).click();
  await expect(page.getByTestId('tenant-created')).toContainText(tenantName);
  const row = page.locator(`tr[data-name="${tenantName}"]`);
  await expect(row).toBeVisible();
  const tenantId = (await row.getAttribute('data-tenant'))!;
  const adminEmail = `${tenantName}@example.com`;
  await page.getByLabel('Tenant', { exact: true }).selectOption(tenantId);
  await page.getByLabel('Email').fill(adminEmail);
  await page.getByLabel('Initial password').fill(ADMIN_PASSWORD);
  await page.getByRole('button', { name: 'Add admin' }).click();
  await expect(page.getByTestId('admin-added')).toContainText(adminEmail);
  await saveScreenshot('tenants');
  await signOut(page);

  // From here on, every request the page sends is recorded.
  const sent: Request[] = [];
  page.on('request', (r) => sent.push(r));
  await signIn(page, adminEmail, ADMIN_PASSWORD);
  await expect(page).toHaveURL(new RegExp(`/tenants/${tenantId}/rules$`));
  await expect(page.getByTestId('no-rules')).toBeVisible();

  // A rule, validated as it is typed.
  await page.getByLabel('Name', { exact: true }).fill('checkout');
  await page.getByLabel('Route').fill('POST /checkout');
  // An exact sliding log: after three checks it denies for ten minutes.
  await page.getByLabel('Algorithm').selectOption('sliding_log');
  await page.getByLabel('Limit', { exact: true }).fill('3x');
  await expect(page.getByTestId('problem-limit')).toHaveText('must be a whole number');
  await expect(page.getByTestId('save-rule')).toBeDisabled();
  await page.getByLabel('Limit', { exact: true }).fill('0');
  await expect(page.getByTestId('problem-limit')).toHaveText('must be at least 1');
  await page.getByLabel('Limit', { exact: true }).fill('3');
  await expect(page.getByTestId('problem-limit')).toHaveText('');
  await page.getByLabel('Per', { exact: true }).fill('10');
  await page.getByLabel('Period unit').selectOption({ label: 'minutes' });
  // The algorithm is explained in a line, next to a link to the whole story.
  await expect(page.getByTestId('algorithm-about')).toContainText('an exact log of admitted requests');
  const doc = await page.request.get((await page.getByRole('link', { name: 'how each algorithm decides' }).getAttribute('href'))!);
  expect(doc.status()).toBe(200);
  expect(await doc.text()).toContain('sliding_log');
  // The behaviour preview, computed in the browser, offers a slow limit twice its limit in its
  // own unit (3 per 10 minutes: 0.6 a minute) for three periods.
  await expect(page.getByTestId('preview-summary')).toContainText('steady traffic at 0.6 requests per minute for 30 min');
  // 5 a minute against 3 per 10 minutes admits 9 (12 if boundaries fall on arrivals), and the
  // steady load is drawn flat: every point offers 5 a minute.
  await page.getByLabel('Offered requests per minute').fill('5');
  await expect(page.getByTestId('preview-summary')).toContainText('of 150 admitted');
  const admitted = Number((await page.getByTestId('preview-summary').textContent())!.match(/(\d+) of 150/)![1]);
  expect(admitted).toBeGreaterThanOrEqual(9);
  expect(admitted).toBeLessThanOrEqual(12);
  const drawn = (await page.getByTestId('preview-summary').getAttribute('data-offered-rates'))!.split(' ');
  expect(drawn.length).toBeGreaterThan(5);
  expect(new Set(drawn)).toEqual(new Set(['5.000']));
  await expect(page.getByTestId('preview-chart').locator('svg')).toBeVisible();
  await expect(page.getByTestId('preview-chart')).toContainText('admitted');
  await saveScreenshot('rules-form');
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('rule-saved')).toContainText('checkout');
  await expect(page.locator('tr[data-name="checkout"]')).toBeVisible();
  // Editing: the form loads the rule; a change shows in the list; then back to 3.
  const ruleRow = page.locator('tr[data-name="checkout"]');
  for (const limit of ['4', '3']) {
    await ruleRow.getByRole('button', { name: 'Edit' }).click();
    await expect(page.getByLabel('Name', { exact: true })).toHaveValue('checkout');
    await page.getByLabel('Limit', { exact: true }).fill(limit);
    await page.getByRole('button', { name: 'Save changes' }).click();
    await expect(ruleRow).toContainText(`${limit} / 10 min`);
  }
  // A change from the list asks first, and says what it did.
  await ruleRow.getByTestId('failure-mode').selectOption('open');
  await expect(ruleRow.getByTestId('failure-question')).toContainText('fail open: allow instead of fail closed: answer 503?');
  const [, unchanged] = await serverFn(page, 'rules/list', { tenant: tenantId });
  expect(JSON.parse(unchanged)[0].failure_mode).toBe('closed');
  await ruleRow.getByTestId('failure-confirm').click();
  await expect(page.getByTestId('change-saved')).toContainText('Saved: rule checkout now fail open: allow when the limiter is down.');
  await expect(ruleRow.getByTestId('failure-mode')).toHaveValue('open');
  await saveScreenshot('rules');
  // The server-rendered page reads correctly with no script at all.
  const noScript = await browser.newContext({ javaScriptEnabled: false });
  await noScript.addCookies(await page.context().cookies());
  const plain = await noScript.newPage();
  await plain.goto(new URL(`/tenants/${tenantId}/rules`, page.url()).toString());
  await expect(plain.locator('tr[data-name="checkout"]')).toContainText('3 / 10 min');
  // The failure mode reads right before any script: the rule's own, not the first option.
  await expect(plain.locator('tr[data-name="checkout"]').getByTestId('failure-mode')).toHaveValue('open');
  await expect(plain.getByTestId('tenant-name')).toContainText(tenantName);
  await noScript.close();

  // A check key, generated in the browser and shown once.
  await page.getByRole('link', { name: 'Keys' }).first().click();
  await expect(page).toHaveURL(/\/keys$/);
  await waitForHydration(page);
  const checkKey = await generateKey(page, 'check', 'checkout-service', true);
  await saveScreenshot('keys-new');
  // The copy button puts exactly the shown key on the clipboard.
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.getByTestId('copy-key').click();
  await expect(page.getByTestId('copy-key')).toHaveText('Copied');
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(checkKey);
  expect(storedHash(checkKey.slice(0, 12))).toBe(sha256(checkKey));
  for (const expected of [200, 200, 200, 429]) {
    expect(await check(request, checkKey, 'POST /checkout')).toBe(expected);
  }
  await page.getByRole('button', { name: 'I have stored it' }).click();
  await expect(page.getByTestId('new-key')).toHaveCount(0);

  // Rotation: the old key keeps working for the 3 s grace period, then stops.
  const oldRow = page.locator(`tr[data-prefix="${checkKey.slice(0, 12)}"]`);
  await oldRow.getByTestId('rotate').click();
  await oldRow.getByTestId('grace-amount').fill('3');
  await oldRow.getByTestId('grace-unit').selectOption({ label: 'seconds' });
  const rotation = page.waitForResponse((r) => r.url().endsWith('/api/keys/rotate') && r.ok());
  await oldRow.getByTestId('rotate-confirm').click();
  await rotation;
  // The server started the grace period before it answered: 3.5 s from now is past it.
  const rotatedAt = Date.now();
  await expect(page.getByTestId('new-key-value')).toHaveText(/^sl_chk_[0-9a-f]{64}$/);
  const newKey = (await page.getByTestId('new-key-value').textContent())!;
  expect(newKey).not.toBe(checkKey);
  expect(await check(request, checkKey, 'GET /free')).toBe(200);
  expect(await check(request, newKey, 'GET /free')).toBe(200);
  await expect(page.locator(`tr[data-prefix="${checkKey.slice(0, 12)}"]`)).toHaveAttribute('data-state', 'grace');
  await page.waitForTimeout(Math.max(0, rotatedAt + 3500 - Date.now()));
  expect(await check(request, checkKey, 'GET /free')).toBe(401);
  expect(await check(request, newKey, 'GET /free')).toBe(200);

  // Revocation: the new key gets 401 within a second of the console's answer.
  const newRow = page.locator(`tr[data-prefix="${newKey.slice(0, 12)}"]`);
  await newRow.getByTestId('revoke').click();
  const revoked = page.waitForResponse((r) => r.url().endsWith('/api/keys/revoke') && r.ok());
  await newRow.getByTestId('revoke-confirm').click();
  await revoked;
  const revokedAt = Date.now();
  let status = 0;
  while (Date.now() - revokedAt < 2000) {
    status = await check(request, newKey, 'GET /free');
    if (status === 401) break;
    await page.waitForTimeout(50);
  }
  expect(status).toBe(401);
  expect(Date.now() - revokedAt).toBeLessThan(1000);
  await expect(page.locator(`tr[data-prefix="${newKey.slice(0, 12)}"]`)).toHaveAttribute('data-state', 'revoked');

  // An admin key works on /v1/admin and is refused on /v1/check.
  const adminKey = await generateKey(page, 'admin', 'automation');
  const rules = await request.get(`/v1/admin/tenants/${tenantId}/rules`, { headers: { 'X-API-Key': adminKey } });
  expect(rules.status()).toBe(200);
  expect((await rules.json())[0].name).toBe('checkout');
  expect(await check(request, adminKey, 'POST /checkout')).toBe(403);
  await saveScreenshot('keys');

  // The plaintext of no key ever left the page; what was sent is each key's SHA-256.
  const shownKeys = [checkKey, newKey, adminKey];
  const created: string[] = [];
  for (const r of sent) {
    const text = `${r.url()}\n${JSON.stringify(r.headers())}\n${r.postData() ?? ''}`;
    for (const key of shownKeys) {
      expect(text.includes(key), `${r.method()} ${r.url()} carried a key`).toBe(false);
      expect(text.includes(key.slice(7)), `${r.method()} ${r.url()} carried a key's secret part`).toBe(false);
    }
    if (r.url().endsWith('/api/keys/create') || r.url().endsWith('/api/keys/rotate')) {
      created.push(JSON.parse(r.postData()!).hash);
    }
  }
  expect(created.sort()).toEqual(shownKeys.map(sha256).sort());

  // The audit log, filtered by action.
  await page.getByRole('link', { name: 'Audit log' }).first().click();
  await expect(page).toHaveURL(/\/audit$/);
  await waitForHydration(page);
  await expect(page.getByTestId('audit-row').first()).toBeVisible();
  await page.getByLabel('Action').selectOption('key.revoke');
  await page.getByTestId('apply-filter').click();
  await expect(page.getByTestId('audit-row')).toHaveCount(1);
  await expect(page.getByTestId('audit-row')).toHaveAttribute('data-actor', `user:${adminEmail}`);
  await saveScreenshot('audit-tenant');
  // A time range with nothing in it; Clear shows everything again.
  await page.getByLabel('From (UTC)').fill('2099-01-01T00:00');
  await page.getByTestId('apply-filter').click();
  await expect(page.getByTestId('no-events')).toBeVisible();
  await page.getByRole('button', { name: 'Clear' }).click();
  await expect(page.getByTestId('audit-row').first()).toBeVisible();

  // Simulate: the exhausted rule would deny, and simulating consumes nothing.
  await page.getByRole('link', { name: 'Simulate' }).first().click();
  await waitForHydration(page);
  await page.getByLabel('Route').fill('POST /checkout');
  await page.getByTestId('simulate').click();
  await expect(page.getByTestId('simulation')).toHaveAttribute('data-allowed', 'false');
  await expect(page.getByTestId('simulation')).toContainText('deciding rule is checkout');
  // Its bucket reset from the result, after a confirmation: the same check is simulated
  // again and would now be allowed, and the audit log has the reset.
  await page.getByTestId('simulated-rule').getByTestId('reset-bucket').click();
  await expect(page.getByText('Clear the tenant-wide bucket of rule checkout?')).toBeVisible();
  await page.getByTestId('reset-bucket-confirm').click();
  await expect(page.getByTestId('reset-done')).toContainText("Rule checkout's bucket for the whole tenant: cleared.");
  await expect(page.getByTestId('simulation')).toHaveAttribute('data-allowed', 'true');
  await saveScreenshot('simulate-reset');
  const [listed, resets] = await serverFn(page, 'audit/list', { tenant: tenantId, filter: { action: 'rule.reset' } });
  expect(listed, resets).toBe(true);
  expect(JSON.parse(resets)).toHaveLength(1);
  expect(JSON.parse(resets)[0].actor).toBe(`user:${adminEmail}`);
  await page.getByLabel('Route').fill('GET /free');
  await page.getByTestId('simulate').click();
  await expect(page.getByTestId('simulation')).toContainText('No rule applies');
  await saveScreenshot('simulate');
});

test('tenant isolation: a tenant admin sees and changes nothing of another tenant', async ({
  page, browserErrors, saveScreenshot,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const a = await tenantWithAdmin(page, unique('alpha'));
  const b = await tenantWithAdmin(page, unique('beta'));
  await signOut(page);

  // B's admin makes a rule and a key.
  await signIn(page, b.email, ADMIN_PASSWORD);
  const [made, rule] = await serverFn(page, 'rules/save', {
    tenant: b.id, id: null,
    body: { name: 'beta-secret-rule', match: 'all', scope: 'tenant', algorithm: 'gcra', limit: 5, period_ms: 1000 },
  });
  expect(made, rule).toBe(true);
  const ruleId = JSON.parse(rule).id;
  await page.goto(`/tenants/${b.id}/keys`);
  await waitForHydration(page);
  await generateKey(page, 'check', 'beta-service');
  const keyId = JSON.parse((await serverFn(page, 'keys/list', { tenant: b.id }))[1])[0].id;
  await signOut(page);

  await signIn(page, a.email, ADMIN_PASSWORD);
  // Through the UI: every page of B's says "not found" and shows nothing of B's.
  for (const tab of ['rules', 'keys', 'audit']) {
    // A real "not found", without the page's forms.
    const response = await page.goto(`/tenants/${b.id}/${tab}`);
    expect(response!.status()).toBe(404);
    // The browser logs the 404 it was answered; that one is expected, and only that one.
    const logged = browserErrors.splice(0);
    expect(logged.every((e) => e.includes('status of 404')), logged.join('\n')).toBe(true);
    await expect(page.getByTestId('not-found')).toContainText('There is no such tenant, or it is not yours.');
    await expect(page.locator('form')).toHaveCount(0);
    await expect(page.locator('body')).not.toContainText('beta-secret-rule');
    await expect(page.locator('body')).not.toContainText('beta-service');
  }
  await saveScreenshot('isolation');
  // Through direct server-function calls with A's session.
  const attempts: [string, object][] = [
    ['rules/list', { tenant: b.id }],
    ['rules/save', { tenant: b.id, id: ruleId, body: { name: 'x', match: 'all', scope: 'tenant', algorithm: 'gcra', limit: 1, period_ms: 1000 } }],
    ['rules/delete', { tenant: b.id, id: ruleId }],
    ['rules/delete', { tenant: a.id, id: ruleId }],
    ['keys/list', { tenant: b.id }],
    ['keys/revoke', { tenant: b.id, key: keyId }],
    ['keys/revoke', { tenant: a.id, key: keyId }],
    ['audit/list', { tenant: b.id, filter: {} }],
    ['simulate', { tenant: b.id, input: { route: 'GET /' } }],
    ['reset_bucket', { tenant: b.id, rule_id: ruleId, input: {} }],
    ['reset_bucket', { tenant: a.id, rule_id: ruleId, input: {} }],
    ['rules/overrides/list', { tenant: b.id, rule: ruleId }],
    ['rules/overrides/set', { tenant: b.id, rule: ruleId, body: { subject: 'x', limit: 1 } }],
    ['rules/overrides/set', { tenant: a.id, rule: ruleId, body: { subject: 'x', limit: 1 } }],
    ['rules/import_envoy', { tenant: b.id, yaml: 'domain: x\ndescriptors: []\n', apply: true }],
    ['rules/export', { tenant: b.id }],
    ['rules/for_route', { tenant: b.id, route: 'GET /' }],
    ['rules/import', { tenant: b.id, text: 'rules: []\n', apply: true }],
  ];
  for (const [endpoint, args] of attempts) {
    const [ok, body] = await serverFn(page, endpoint, args);
    expect(ok, `${endpoint} answered ${body}`).toBe(false);
    expect(body).toContain('NotFound');
    expect(body).not.toContain('beta-secret-rule');
  }
  await signOut(page);
  // B's rule and key are as they were.
  await signIn(page, b.email, ADMIN_PASSWORD);
  const [, rules] = await serverFn(page, 'rules/list', { tenant: b.id });
  expect(JSON.parse(rules)[0].limit).toBe(5);
  const [, keys] = await serverFn(page, 'keys/list', { tenant: b.id });
  expect(JSON.parse(keys)[0].revoked_at).toBeNull();
  // Its own admin can delete it, after a confirmation.
  await page.goto(`/tenants/${b.id}/rules`);
  await waitForHydration(page);
  await page.locator('tr[data-name="beta-secret-rule"]').getByTestId('delete-rule').click();
  await page.getByTestId('delete-rule-confirm').click();
  await expect(page.getByTestId('no-rules')).toBeVisible();
});

test('the operator suspends a tenant: its keys get 403 and the audit log says who and when', async ({
  page, browserErrors, saveScreenshot, request,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('gamma'));
  await page.goto(`/tenants/${t.id}/keys`);
  await waitForHydration(page);
  const key = await generateKey(page, 'check', 'gamma-service');
  expect(await check(request, key, 'GET /')).toBe(200);

  await page.goto('/tenants');
  await waitForHydration(page);
  const row = page.locator(`tr[data-tenant="${t.id}"]`);
  await row.getByTestId('suspend').click();
  await expect(row).toContainText('Its keys stop working at once.');
  const before = Date.now();
  await row.getByTestId('suspend-confirm').click();
  await expect(row.getByTestId('tenant-status')).toHaveText('suspended');
  expect(await check(request, key, 'GET /')).toBe(403);

  await page.goto(`/tenants/${t.id}/audit`);
  await waitForHydration(page);
  const event = page.locator('tr[data-action="tenant.suspend"]');
  await expect(event).toHaveCount(1);
  await expect(event).toHaveAttribute('data-actor', `user:${OPERATOR}`);
  const at = Number(await event.getByTestId('audit-at').getAttribute('data-ms'));
  expect(at).toBeGreaterThanOrEqual(before - 1000);
  expect(at).toBeLessThanOrEqual(Date.now());
  await saveScreenshot('audit-suspended');
  await page.goto('/audit');
  await waitForHydration(page);
  await expect(page.locator('tr[data-action="tenant.suspend"]').first()).toBeVisible();
  await saveScreenshot('audit-platform');

  // Resumed, the key works again.
  await page.goto('/tenants');
  await waitForHydration(page);
  await row.getByTestId('resume').click();
  await row.getByTestId('resume-confirm').click();
  await expect(row.getByTestId('tenant-status')).toHaveText('active');
  expect(await check(request, key, 'GET /')).toBe(200);
});

test('an envoyproxy/ratelimit configuration is previewed, then applied as descriptor rules', async ({
  page, browserErrors, saveScreenshot,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('edge'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  await expect(page).toHaveURL(new RegExp(`/tenants/${t.id}/rules$`));
  await waitForHydration(page);
  const example = readFileSync(join(__dirname, '..', '..', 'docs', 'examples', 'envoy-ratelimit.yaml'), 'utf8');

  // Apply stays off until a preview of the very text in the box.
  await expect(page.getByTestId('import-apply')).toBeDisabled();
  await page.getByLabel('Configuration (YAML)').fill(example);
  await page.getByTestId('import-preview').click();
  await expect(page.getByTestId('import-plan')).toContainText('4 to create, 0 to update, 0 to delete, 0 unchanged');
  const changes = page.getByTestId('import-changes');
  await expect(changes.locator('tr[data-name="login"]')).toContainText('path=/login');
  await expect(changes.locator('tr[data-name="envoy.path_/login.user"]')).toContainText('path=/login, user');
  await expect(changes.locator('tr[data-name="envoy.path_/search"]')).toContainText('(shadow)');
  await expect(page.getByTestId('import-notes')).toContainText('path=/health: unlimited');
  // A preview changes nothing.
  await expect(page.getByTestId('no-rules')).toBeVisible();
  await saveScreenshot('rules-import-preview');

  await page.getByTestId('import-apply').click();
  await expect(page.getByTestId('import-applied')).toContainText('Applied: 4 to create');
  for (const name of ['login', 'envoy.remote_address', 'envoy.path_/login.user', 'envoy.path_/search']) {
    await expect(page.locator(`[data-testid="rules-table"] tr[data-name="${name}"]`)).toBeVisible();
  }
  await expect(page.locator('[data-testid="rules-table"] tr[data-name="login"]')).toContainText('path=/login');
  // Imported rules take a limit from the request, as envoyproxy/ratelimit does; the form shows it.
  await page.locator('[data-testid="rules-table"] tr[data-name="login"]').getByRole('button', { name: 'Edit' }).click();
  await expect(page.getByLabel('Name', { exact: true })).toHaveValue('login');
  await expect(page.locator('#rule-override')).toBeChecked();
  await expect(page.locator('#rule-override')).toBeEnabled();

  // An edited text must be previewed again before it can be applied.
  await page.getByLabel('Configuration (YAML)').fill(example.replace('requests_per_unit: 3', 'requests_per_unit: 5'));
  await expect(page.getByTestId('import-apply')).toBeDisabled();
  await page.getByTestId('import-preview').click();
  await expect(page.getByTestId('import-plan')).toContainText('0 to create, 1 to update, 0 to delete, 3 unchanged');
  await expect(page.getByTestId('import-changes').locator('tr[data-name="envoy.remote_address"]')).toContainText('update');

  // What is not a configuration is refused, saying where (called directly: the page would
  // log the refusal as a browser error).
  const [ok, body] = await serverFn(page, 'rules/import_envoy', {
    tenant: t.id, yaml: 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n', apply: true,
  });
  expect(ok).toBe(false);
  expect(body).toContain('unknown unit');
  // Apply carries the preview's fingerprint: a plan that is no longer the previewed one
  // (here, a fingerprint of no preview at all) is refused and changes nothing.
  const [stale, said] = await serverFn(page, 'rules/import_envoy', {
    tenant: t.id, yaml: example.replace('requests_per_unit: 3', 'requests_per_unit: 7'), apply: true, expect: 'not-the-preview',
  });
  expect(stale).toBe(false);
  expect(said).toContain('preview it again');
  const [, rules] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect(JSON.parse(rules).map((r: { name: string }) => r.name).sort()).toEqual(
    ['envoy.path_/login.user', 'envoy.path_/search', 'envoy.remote_address', 'login'],
  );
});

test('changes from the rules list ask first, say what changed and can be undone; states read as words', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('states'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  const base = { match: 'default', scope: 'tenant', algorithm: 'gcra', limit: 5, period_ms: 1000 };
  for (const body of [
    { ...base, name: 'live' },
    { ...base, name: 'off', match: 'all', enabled: false },
    { ...base, name: 'quiet', match: 'all', shadow: true },
  ]) {
    const [made, rule] = await serverFn(page, 'rules/save', { tenant: t.id, id: null, body });
    expect(made, rule).toBe(true);
  }
  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);
  const row = (name: string) => page.locator(`tr[data-name="${name}"]`);
  await expect(row('live').getByTestId('rule-state')).toHaveText('enforced');
  await expect(row('off').getByTestId('rule-state')).toHaveText('disabled');
  await expect(row('quiet').getByTestId('rule-state')).toHaveText('shadow');
  await expect(row('off').getByTestId('toggle-shadow')).toHaveCount(0);

  // The question takes the focus; Escape cancels it, and nothing changes.
  await row('live').getByTestId('toggle-shadow').click();
  await expect(row('live')).toContainText('counted as would-deny but never denied');
  await expect(row('live').getByTestId('toggle-shadow-confirm')).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(row('live').getByTestId('toggle-shadow-confirm')).toHaveCount(0);
  await expect(row('live').getByTestId('rule-state')).toHaveText('enforced');

  // Confirmed: saved, said, and undone in one step.
  await row('live').getByTestId('toggle-shadow').click();
  await row('live').getByTestId('toggle-shadow-confirm').click();
  await expect(page.getByTestId('change-saved')).toContainText('Saved: rule live is now shadow: counted, never denied.');
  await expect(row('live').getByTestId('rule-state')).toHaveText('shadow');
  await page.getByTestId('undo-change').click();
  await expect(page.getByTestId('change-saved')).toContainText('Undone: rule live is back as it was.');
  await expect(page.getByTestId('undo-change')).toHaveCount(0);
  await expect(row('live').getByTestId('rule-state')).toHaveText('enforced');
  const [, listed] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect(JSON.parse(listed).find((r: { name: string }) => r.name === 'live').shadow).toBe(false);

  // A failure mode picked and then cancelled goes back to what it was.
  await row('quiet').getByTestId('failure-mode').selectOption('local');
  await expect(row('quiet').getByTestId('failure-question')).toContainText('limit locally instead of fail closed: answer 503?');
  await row('quiet').getByRole('button', { name: 'Cancel' }).click();
  await expect(row('quiet').getByTestId('failure-question')).toHaveCount(0);
  await expect(row('quiet').getByTestId('failure-mode')).toHaveValue('closed');
});

test('simulate says whether a subject is needed, gives waits in units, and drops a result once its input changes', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('sim'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  const [made, rule] = await serverFn(page, 'rules/save', {
    tenant: t.id, id: null,
    body: { name: 'per-user', match: 'exact', route: 'GET /orders', scope: 'subject', algorithm: 'fixed_window', limit: 1, period_ms: 3_600_000 },
  });
  expect(made, rule).toBe(true);
  await page.goto(`/tenants/${t.id}/simulate`);
  await waitForHydration(page);

  // Entering the route says whether the subject is needed, and by which rule.
  await page.getByLabel('Route').fill('get  /orders');
  await page.getByLabel('Route').press('Tab');
  await expect(page.getByTestId('subject-hint')).toHaveText('Needed: rule per-user counts each subject apart.');
  await expect(page.getByLabel('Subject')).toBeFocused();
  await page.getByLabel('Subject').fill('ann');
  await page.getByTestId('simulate').click();
  await expect(page.getByTestId('simulation')).toHaveAttribute('data-allowed', 'true');
  // An hour's window: "full again" reads in minutes and seconds, not milliseconds.
  await expect(page.getByTestId('full-again')).toHaveText(/^(now|\d+(\.\d)? s|\d+ min( \d+ s)?|1 h)$/);
  await expect(page.getByTestId('retry-after')).toHaveText('—');

  // Once the input changes, the old answer is no longer shown as if it were the new one.
  await page.getByLabel('Subject').fill('bob');
  await expect(page.getByTestId('simulation')).toHaveCount(0);
  await expect(page.getByTestId('simulation-stale')).toBeVisible();
  await page.getByLabel('Route').fill('');
  await expect(page.getByTestId('simulation')).toHaveCount(0);
  await page.getByLabel('Route').fill('GET /elsewhere');
  await page.getByLabel('Route').press('Tab');
  await expect(page.getByTestId('subject-hint')).toHaveText('Not used: no rule applies to GET /elsewhere.');
});

test('the audit log reads as sentences, filters on part of an actor kept in the URL, and pages', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('audit'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  const body = { name: 'orders', match: 'exact', route: 'GET /orders', scope: 'tenant', algorithm: 'gcra', limit: 10, period_ms: 1000 };
  const [made, saved] = await serverFn(page, 'rules/save', { tenant: t.id, id: null, body });
  expect(made, saved).toBe(true);
  const id = JSON.parse(saved).id;
  const [edited, why] = await serverFn(page, 'rules/save', { tenant: t.id, id, body: { ...body, limit: 20 } });
  expect(edited, why).toBe(true);
  const [deleted, said] = await serverFn(page, 'rules/delete', { tenant: t.id, id });
  expect(deleted, said).toBe(true);

  await page.goto(`/tenants/${t.id}/audit`);
  await waitForHydration(page);
  const what = page.getByTestId('audit-what');
  await expect(what.nth(0)).toContainText('deleted rule orders (exact GET /orders, 20 / 1 s)');
  await expect(what.nth(1)).toContainText('changed rule orders: limit 10 → 20');
  await expect(what.nth(2)).toContainText('created rule orders (exact GET /orders, 10 / 1 s)');

  // Part of the actor, in another case; the filter is in the URL and survives a reload.
  const part = t.email.split('@')[0].toUpperCase();
  await page.getByLabel('Actor contains').fill(part);
  await page.getByTestId('apply-filter').click();
  await expect(page).toHaveURL(new RegExp(`\\?actor=${part}$`));
  await expect(page.getByTestId('audit-row')).toHaveCount(3);
  await page.reload();
  await waitForHydration(page);
  await expect(page.getByLabel('Actor contains')).toHaveValue(part);
  await expect(page.getByTestId('audit-row')).toHaveCount(3);
  await page.getByLabel('Actor contains').fill('nobody-like-this');
  await page.getByTestId('apply-filter').click();
  await expect(page.getByTestId('no-events')).toBeVisible();

  // A hundred events to a page; the older ones on the next.
  for (let limit = 1; limit <= 100; limit++) {
    const [ok, rule] = await serverFn(page, 'rules/save', { tenant: t.id, id: null, body: { ...body, name: `r${limit}`, route: `GET /r${limit}` } });
    expect(ok, rule).toBe(true);
    const [gone, why2] = await serverFn(page, 'rules/delete', { tenant: t.id, id: JSON.parse(rule).id });
    expect(gone, why2).toBe(true);
  }
  await page.goto(`/tenants/${t.id}/audit`);
  await waitForHydration(page);
  await expect(page.getByTestId('audit-row')).toHaveCount(100);
  await expect(page.getByTestId('newest-events')).toHaveCount(0);
  await page.getByTestId('older-events').click();
  await expect(page).toHaveURL(/\?before=\d+$/);
  // Two events per rule r1 to r100, newest first, 100 a page: the second page ends with r1's
  // creation, and the third holds what came before.
  await expect(page.getByTestId('audit-row')).toHaveCount(100);
  await expect(page.getByTestId('audit-what').last()).toContainText('created rule r1 ');
  await page.getByTestId('older-events').click();
  await expect(page.getByTestId('audit-what').first()).toContainText('deleted rule orders');
  await expect(page.getByTestId('older-events')).toHaveCount(0);
  await page.getByTestId('newest-events').click();
  await expect(page.getByTestId('audit-what').first()).toContainText('deleted rule r100 ');
});

test('pages a user may not use say so with their status, and an ended session signs in and comes back', async ({
  page, saveScreenshot,
}) => {
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('gate'));
  // An operator opening a tenant that does not exist: 404 and no forms.
  const missing = await page.goto('/tenants/no-such-tenant/rules');
  expect(missing!.status()).toBe(404);
  await expect(page.getByTestId('not-found')).toBeVisible();
  await expect(page.locator('main form')).toHaveCount(0);
  await signOut(page);

  // A tenant admin on the operators' pages: 403, said plainly, no create forms.
  await signIn(page, t.email, ADMIN_PASSWORD);
  for (const path of ['/tenants', '/audit', '/dashboard']) {
    const response = await page.goto(path);
    expect(response!.status(), path).toBe(403);
    await expect(page.getByTestId('forbidden')).toContainText('This page is for operators');
    await expect(page.locator('main form')).toHaveCount(0);
  }
  await saveScreenshot('forbidden');
  // The header matches the session on a page that does not exist.
  await page.goto('/no-such-page');
  await expect(page.getByTestId('nav-account')).toHaveText(t.email);

  // The session ends (here: its cookie is dropped); the next page asks to sign in, then
  // comes back to where the user was.
  await page.context().clearCookies();
  await page.goto(`/tenants/${t.id}/keys?x=1`);
  await expect(page).toHaveURL(/\/sign-in\?next=/);
  await waitForHydration(page);
  await page.getByLabel('Email').fill(t.email);
  await page.getByLabel('Password').fill(ADMIN_PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(new RegExp(`/tenants/${t.id}/keys\\?x=1$`));
});

test('a route written any way is saved in its normal form, a second rule on it asks first, and the page says which rules apply', async ({
  page, browserErrors, saveScreenshot,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('routes'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  await expect(page).toHaveURL(new RegExp(`/tenants/${t.id}/rules$`));
  await waitForHydration(page);

  // What is not a method and a path is refused as it is typed.
  await page.getByLabel('Name', { exact: true }).fill('payments');
  await page.getByLabel('Route').fill('payments');
  await expect(page.getByTestId('problem-route')).toContainText('a route is a method and a path');
  await expect(page.getByTestId('save-rule')).toBeDisabled();
  // Any case, spacing or query: the form shows the one form it is saved and matched in.
  await page.getByLabel('Route').fill('  post   /payments?from=docs ');
  await expect(page.getByTestId('problem-route')).toBeEmpty();
  await expect(page.getByTestId('route-normal')).toHaveText('Saved as POST /payments: checks match routes in this form.');
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('rule-saved')).toContainText('payments');
  await expect(page.locator('tr[data-name="payments"]')).toContainText('exact POST /payments');

  // A second rule on the same route asks first, saying which rule is there already.
  await page.getByLabel('Name', { exact: true }).fill('payments-burst');
  await page.getByLabel('Route').fill('POST /payments');
  await expect(page.getByTestId('route-normal')).toBeEmpty();
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('twin-warning')).toContainText('Rule "payments" already applies to POST /payments');
  await saveScreenshot('rules-same-route');
  const [, listed] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect(JSON.parse(listed)).toHaveLength(1);
  await page.getByTestId('save-twin').click();
  await expect(page.getByTestId('rule-saved')).toContainText('payments-burst');
  await expect(page.getByTestId('twin-warning')).toHaveCount(0);
  await expect(page.locator('tr[data-name="payments-burst"]')).toBeVisible();

  // Which rules a route hits, resolved by the decision core, in any spelling.
  await page.getByLabel('Which rules apply to').fill(' post  /payments ');
  await page.getByTestId('which-rules').click();
  const found = page.getByTestId('which-result');
  await expect(found).toContainText('A check of POST /payments is counted by');
  await expect(found.locator('li[data-name="payments"]')).toBeVisible();
  await expect(found.locator('li[data-name="payments-burst"]')).toBeVisible();
  await page.getByLabel('Which rules apply to').fill('GET /elsewhere');
  await page.getByTestId('which-rules').click();
  await expect(found).toContainText('No rule applies to GET /elsewhere');

  // Simulate matches the same way.
  const [ok, simulated] = await serverFn(page, 'simulate', { tenant: t.id, input: { route: 'post  /payments ' } });
  expect(ok, simulated).toBe(true);
  expect(JSON.parse(simulated).rules.map((r: { policy: string }) => r.policy).sort()).toEqual(['payments', 'payments-burst']);
});

test('a rules file is exported, edited, previewed as a plan, applied, and audited', async ({
  page, browserErrors, saveScreenshot,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('files'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  for (const body of [
    { name: 'search', match: 'exact', route: 'GET /search', scope: 'subject', algorithm: 'token_bucket', limit: 10, period_ms: 1000 },
    { name: 'everything', match: 'all', scope: 'tenant', algorithm: 'fixed_window', limit: 1000, period_ms: 60000 },
    { name: 'old', match: 'default', scope: 'tenant', algorithm: 'gcra', limit: 5, period_ms: 1000 },
  ]) {
    const [made, rule] = await serverFn(page, 'rules/save', { tenant: t.id, id: null, body });
    expect(made, rule).toBe(true);
  }

  // The page is rendered on the server: the file is there before any script runs.
  const raw = await (await page.request.get(`/tenants/${t.id}/rules/file`)).text();
  expect(raw).toContain('name: everything');
  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);
  await page.getByTestId('rules-file-link').click();
  await expect(page).toHaveURL(new RegExp(`/tenants/${t.id}/rules/file$`));
  await waitForHydration(page);
  const box = page.getByLabel('The rules (YAML)');
  const exported = await box.inputValue();
  // Ordered by name, without ids.
  expect(exported.indexOf('name: everything')).toBeLessThan(exported.indexOf('name: old'));
  expect(exported.indexOf('name: old')).toBeLessThan(exported.indexOf('name: search'));
  expect(exported).not.toContain('id:');
  // The download is the same text.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByTestId('rules-file-download').click(),
  ]);
  expect(download.suggestedFilename()).toBe(`rules-${t.id}.yaml`);
  expect(readFileSync((await download.path())!, 'utf8')).toBe(exported);

  // Unedited, the file is the tenant's rules: nothing to apply.
  await expect(page.getByTestId('rules-file-apply')).toBeDisabled();
  await page.getByTestId('rules-file-preview').click();
  await expect(page.getByTestId('rules-file-same')).toBeVisible();
  await expect(page.getByTestId('rules-file-unchanged')).toContainText('everything, old, search');
  await expect(page.getByTestId('rules-file-apply')).toBeDisabled();

  // Edited: one limit changed, one rule removed, one added.
  const oldRule = /- name: old\n(  .*\n)*/;
  expect(exported).toMatch(oldRule);
  const edited = exported
    .replace('limit: 10\n', 'limit: 25\n')
    .replace(oldRule, '')
    + '- name: fresh\n  match: prefix\n  route: GET /fresh\n  scope: tenant\n  algorithm: gcra\n  limit: 3\n  period_ms: 1000\n';
  await box.fill(edited);
  await expect(page.getByTestId('rules-file-apply')).toBeDisabled();
  await page.getByTestId('rules-file-preview').click();
  await expect(page.getByTestId('rules-file-plan')).toContainText('1 to create, 1 to update, 1 to delete, 1 unchanged');
  const changes = page.getByTestId('rules-file-changes');
  await expect(changes.locator('tr[data-name="search"][data-change="update"]')).toContainText('limit: 10 → 25');
  await expect(changes.locator('tr[data-name="old"][data-change="delete"]')).toBeVisible();
  await expect(changes.locator('tr[data-name="fresh"][data-change="create"]')).toContainText('3 / 1 s');
  await saveScreenshot('rules-file-plan');
  // A preview changes nothing.
  const [, before] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect(JSON.parse(before).map((r: { name: string }) => r.name).sort()).toEqual(['everything', 'old', 'search']);

  // A file with a problem shows it on its rule and cannot be applied.
  await box.fill(edited.replace('limit: 3\n', 'limit: 0\n'));
  await page.getByTestId('rules-file-preview').click();
  await expect(page.getByTestId('rules-file-refused')).toBeVisible();
  await expect(changes.locator('tr[data-name="fresh"]')).toContainText('limit');
  await expect(page.getByTestId('rules-file-apply')).toBeDisabled();

  // The good file again, previewed, then applied.
  await box.fill(edited);
  await page.getByTestId('rules-file-preview').click();
  await expect(page.getByTestId('rules-file-plan')).toBeVisible();
  await page.getByTestId('rules-file-apply').click();
  await expect(page.getByTestId('rules-file-applied')).toContainText('Applied: 1 to create, 1 to update, 1 to delete, 1 unchanged');
  // The box now holds the tenant's rules as they are.
  await expect(box).toHaveValue(/name: fresh/);
  await expect(box).not.toHaveValue(/name: old/);
  const [, after] = await serverFn(page, 'rules/list', { tenant: t.id });
  const rules = JSON.parse(after) as { name: string; limit: number }[];
  expect(rules.map((r) => r.name).sort()).toEqual(['everything', 'fresh', 'search']);
  expect(rules.find((r) => r.name === 'search')!.limit).toBe(25);

  // The audit log shows one import.
  await page.goto(`/tenants/${t.id}/audit`);
  await waitForHydration(page);
  await page.getByLabel('Action').selectOption('rules.import');
  await page.getByTestId('apply-filter').click();
  await expect(page.getByTestId('audit-row')).toHaveCount(1);
  await expect(page.getByTestId('audit-row')).toContainText('fresh');
  await expect(page.getByTestId('audit-row')).toHaveAttribute('data-actor', `user:${t.email}`);
});

test('a tenant admin gives some customers another limit with overrides on the rules page', async ({
  page, request, browserErrors, saveScreenshot,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('gamma'));
  await signOut(page);
  await signIn(page, t.email, ADMIN_PASSWORD);
  const [made, rule] = await serverFn(page, 'rules/save', {
    tenant: t.id, id: null,
    body: { name: 'per-customer', match: 'default', scope: 'subject', algorithm: 'fixed_window', limit: 1, period_ms: 3_600_000 },
  });
  expect(made, rule).toBe(true);
  await page.goto(`/tenants/${t.id}/keys`);
  await waitForHydration(page);
  const key = await generateKey(page, 'check', 'service');
  const checkAs = async (subject: string) =>
    (await request.post('/v1/check', { headers: { 'X-API-Key': key }, data: { route: 'GET /orders', subject } })).status();

  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);
  await page.locator('tr[data-name="per-customer"]').getByTestId('open-overrides').click();
  await expect(page.getByTestId('overrides')).toContainText('Overrides of per-customer');
  await expect(page.getByTestId('no-overrides')).toBeVisible();
  // A lone `*` is no prefix: refused in the browser, with the field named.
  await page.getByLabel('Subject or prefix*').fill('*');
  await page.getByLabel('Override limit').fill('3');
  await page.getByTestId('save-override').click();
  await expect(page.getByTestId('override-problems')).toContainText('subject');
  await page.getByLabel('Subject or prefix*').fill('acme-*');
  await page.getByTestId('save-override').click();
  await expect(page.getByTestId('override-saved')).toContainText('acme-* now gets 3');
  await expect(page.locator('tr[data-testid="override-row"][data-subject="acme-*"]')).toBeVisible();
  await saveScreenshot('overrides');

  // acme-1 gets the override's 3 an hour; anyone else the rule's 1.
  expect([await checkAs('acme-1'), await checkAs('acme-1'), await checkAs('acme-1'), await checkAs('acme-1')])
    .toEqual([200, 200, 200, 429]);
  expect([await checkAs('zed'), await checkAs('zed')]).toEqual([200, 429]);

  // Deleted after a confirmation: acme-2 is back to the rule's limit.
  await page.getByTestId('delete-override').click();
  await page.getByTestId('delete-override-confirm').click();
  await expect(page.getByTestId('no-overrides')).toBeVisible();
  expect([await checkAs('acme-2'), await checkAs('acme-2')]).toEqual([200, 429]);
  for (const action of ['override.set', 'override.delete']) {
    const [ok, events] = await serverFn(page, 'audit/list', { tenant: t.id, filter: { action } });
    expect(ok, events).toBe(true);
    expect(JSON.parse(events), action).toHaveLength(1);
  }
});

test('on a page without clipboard access a new key is selected for copying by hand, and leaving asks first', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  // As on a console served over plain HTTP (an insecure context): no navigator.clipboard.
  await page.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'clipboard', { get: () => undefined, configurable: true });
  });
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('delta'));
  await page.goto(`/tenants/${t.id}/keys`);
  await waitForHydration(page);
  const key = await generateKey(page, 'check', 'service', true);
  await page.getByTestId('copy-key').click();
  await expect(page.getByTestId('copy-by-hand')).toContainText('The key is selected');
  await expect(page.getByTestId('copy-key')).toHaveText('Copy');
  expect(await page.evaluate(() => window.getSelection()!.toString())).toBe(key);

  // Closing the page while the key is shown asks first; once it is stored, it does not.
  const asked = page.waitForEvent('dialog');
  await page.close({ runBeforeUnload: true });
  const dialog = await asked;
  expect(dialog.type()).toBe('beforeunload');
  await dialog.dismiss();
  expect(page.isClosed()).toBe(false);
  await page.getByRole('button', { name: 'I have stored it' }).click();
  await expect(page.getByTestId('new-key')).toHaveCount(0);
  let askedAgain = false;
  page.on('dialog', (d) => { askedAgain = true; void d.accept(); });
  await page.close({ runBeforeUnload: true });
  await expect.poll(() => page.isClosed()).toBe(true);
  expect(askedAgain).toBe(false);
});

test('keys: an expiry when made, a command ready to paste, grace in hours with the time left, which key replaced which, and a filter', async ({
  page, browserErrors,
}) => {
  const t = await signedInAsNewTenantAdmin(page, 'keys-ux');
  await page.goto(`/tenants/${t.id}/keys`);
  await waitForHydration(page);

  // A key that expires in 7 days; the example under it works as pasted into a shell.
  await page.getByLabel('Expires').selectOption({ label: 'in 7 days' });
  const key = await generateKey(page, 'check', 'billing-service', true);
  const example = (await page.getByTestId('new-key-example').textContent())!;
  expect(example).toContain(key);
  expect(execSync(example, { encoding: 'utf8' })).toMatch(/^HTTP\/1\.1 200/);
  await page.getByRole('button', { name: 'I have stored it' }).click();
  const old = page.locator(`tr[data-prefix="${key.slice(0, 12)}"]`);
  const sevenDays = new Date(Date.now() + 7 * 86_400_000).toISOString().slice(0, 10);
  await expect(old.locator('td').nth(4)).toContainText(sevenDays);

  // Rotation with a grace period in hours: the old key says how long it has left, in a badge
  // unlike a live key's, and each row names the other key.
  await old.getByTestId('rotate').click();
  await old.getByTestId('grace-amount').fill('2');
  await old.getByTestId('grace-unit').selectOption({ label: 'hours' });
  await old.getByTestId('rotate-confirm').click();
  await expect(page.getByTestId('new-key-value')).toHaveText(/^sl_chk_/);
  const replacement = (await page.getByTestId('new-key-value').textContent())!;
  await page.getByRole('button', { name: 'I have stored it' }).click();
  const fresh = page.locator(`tr[data-prefix="${replacement.slice(0, 12)}"]`);
  await expect(old.getByTestId('key-state')).toHaveText(/^grace: (1 h 59 min|2 h) left$/);
  await expect(old.getByTestId('key-state')).toHaveClass(/warn/);
  await expect(fresh.getByTestId('key-state')).toHaveText('live');
  await expect(fresh.getByTestId('key-state')).not.toHaveClass(/warn/);
  await expect(old.getByTestId('replaced-by')).toContainText(replacement.slice(0, 12));
  await expect(fresh.getByTestId('replaces')).toContainText(key.slice(0, 12));

  // A grace period past the server's 30 days is refused in words before it is sent.
  await fresh.getByTestId('rotate').click();
  await fresh.getByTestId('grace-amount').fill('31');
  await fresh.getByTestId('grace-unit').selectOption({ label: 'days' });
  await expect(fresh).toContainText('at most 30 days');
  await expect(fresh.getByTestId('rotate-confirm')).toBeDisabled();
  await fresh.getByRole('button', { name: 'Cancel' }).click();
  // Opened again, the form shows the unit it will send (days), not its first default.
  await fresh.getByTestId('rotate').click();
  await expect(fresh.getByTestId('grace-unit')).toHaveValue('86400');
  await expect(fresh).toContainText('at most 30 days');
  await fresh.getByRole('button', { name: 'Cancel' }).click();

  // The filter: part of a name, and working keys only.
  const other = await generateKey(page, 'check', 'search-service');
  const otherRow = page.locator(`tr[data-prefix="${other.slice(0, 12)}"]`);
  await otherRow.getByTestId('revoke').click();
  await otherRow.getByTestId('revoke-confirm').click();
  await expect(otherRow).toHaveAttribute('data-state', 'revoked');
  await expect(page.getByTestId('key-row')).toHaveCount(3);
  await page.getByTestId('key-filter').fill('BILLING');
  await expect(page.getByTestId('key-row')).toHaveCount(2);
  await page.getByTestId('key-filter').fill('search');
  await expect(page.getByTestId('key-row')).toHaveCount(1);
  await page.getByTestId('working-only').check();
  await expect(page.getByTestId('key-row')).toHaveCount(0);
  await expect(page.getByTestId('keys-none-shown')).toBeVisible();
  await page.getByTestId('key-filter').fill('');
  await expect(page.getByTestId('key-row')).toHaveCount(2);
  await expect(page.getByTestId('keys-none-shown')).toBeHidden();
  expect(browserErrors).toEqual([]);
});
