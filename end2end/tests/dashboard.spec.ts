// The live dashboards in headless Chromium: under steady traffic, the operator's fleet view and
// a tenant admin's view take a new frame every second over server-sent events, switch ranges,
// and are saved as screenshots while they update.
import { createHash, randomBytes } from 'node:crypto';
import {
  test, expect, signIn, waitForHydration, unique, OPERATOR, OPERATOR_PASSWORD, ADMIN_PASSWORD,
} from './fixtures';
import type { APIRequestContext, Locator, Page } from '@playwright/test';

/** Calls a JSON server function from the page itself (so the browser sends its Origin and
 * fetch metadata, as the console's own script does), with the page's session. */
async function serverFn(page: Page, endpoint: string, args: object): Promise<string> {
  const [ok, body] = await page.evaluate(async ([endpoint, args]) => {
    const response = await fetch(`/api/${endpoint}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(args),
    });
    return [response.ok, await response.text()] as [boolean, string];
  }, [endpoint, args] as const);
  expect(ok, `${endpoint}: ${body}`).toBe(true);
  return body;
}

/** Sends checks every `everyMs` until stopped; counts the answers. */
function traffic(request: APIRequestContext, key: string, everyMs: number) {
  const seen = { allowed: 0, denied: 0, other: 0 };
  let running = true;
  const done = (async () => {
    while (running) {
      const response = await request.post('/v1/check', {
        headers: { 'X-API-Key': key },
        data: { route: 'POST /checkout' },
      });
      const status = response.status();
      if (status === 200) seen.allowed += 1;
      else if (status === 429) seen.denied += 1;
      else seen.other += 1;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return { seen, stop: async () => { running = false; await done; } };
}

const frame = (page: Page) => page.getByTestId('dashboard-frame');

async function numberAttr(locator: Locator, name: string): Promise<number> {
  return Number(await locator.getAttribute(name));
}

/** Waits for a newer frame than the one on the page now, and returns the old and new `data-latest`. */
async function nextFrame(page: Page): Promise<[number, number]> {
  const before = await numberAttr(frame(page), 'data-latest');
  await expect.poll(() => numberAttr(frame(page), 'data-latest'), { timeout: 5_000 }).toBeGreaterThan(before);
  return [before, await numberAttr(frame(page), 'data-latest')];
}

test('the fleet and tenant dashboards update live while traffic flows', async ({
  page, browserErrors, saveScreenshot, request,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const tenant = JSON.parse(await serverFn(page, 'tenants/create', { name: unique('dash') })).id as string;
  const email = `${unique('dash-admin')}@example.com`;
  await serverFn(page, 'tenants/add_admin', { tenant, email, password: ADMIN_PASSWORD });
  await serverFn(page, 'rules/save', {
    tenant, id: null,
    body: { name: 'checkout', match: 'exact', route: 'POST /checkout', scope: 'tenant', algorithm: 'fixed_window', limit: 10, period_ms: 1000 },
  });
  // A check key made as the console makes it: only its hash and prefix reach the server.
  const key = `sl_chk_${randomBytes(32).toString('hex')}`;
  await serverFn(page, 'keys/create', {
    tenant, kind: 'check', name: 'load',
    hash: createHash('sha256').update(key).digest('hex'), prefix: key.slice(0, 12),
  });

  // About 25 checks a second against a limit of 10 a second: some allowed, some denied.
  const load = traffic(request, key, 40);
  try {
    await page.goto('/dashboard');
    await waitForHydration(page);
    await expect(page.getByRole('heading', { name: 'Fleet dashboard' })).toBeVisible();
    await expect(page.getByTestId('live-status')).toHaveAttribute('data-status', 'live');
    await expect(page.getByTestId('chart-decisions').locator('.plot svg')).toHaveCount(1);
    await expect(page.getByTestId('chart-latency').locator('.plot svg')).toHaveCount(1);
    // The charts have units and legends.
    await expect(page.getByTestId('chart-decisions')).toContainText('decisions per second');
    await expect(page.getByTestId('chart-decisions')).toContainText('denied');
    await expect(page.getByTestId('chart-latency')).toContainText('latency (ms)');
    await expect(page.getByTestId('chart-latency')).toContainText('Limiter latency (in-process');

    // Frames keep coming, and the counts grow with the traffic.
    const decided = async () => (await numberAttr(frame(page), 'data-allowed')) + (await numberAttr(frame(page), 'data-denied'));
    await expect.poll(decided, { timeout: 5_000 }).toBeGreaterThan(0);
    const firstCount = await decided();
    await saveScreenshot('dashboard-fleet-1');
    const [t1, t2] = await nextFrame(page);
    expect(t2).toBeGreaterThan(t1);
    await expect.poll(decided, { timeout: 5_000 }).toBeGreaterThan(firstCount);
    await expect.poll(() => numberAttr(frame(page), 'data-denied'), { timeout: 5_000 }).toBeGreaterThan(0);
    await saveScreenshot('dashboard-fleet-2');
    // The page shows the last second that has ended (the push itself is timed in Rust, in
    // dashboard.rs; this adds the test's own polling and the screenshot).
    const lag = Date.now() / 1000 - ((await numberAttr(frame(page), 'data-latest')) + 1);
    expect(lag).toBeLessThan(3);
    await expect(page.getByTestId('top-policies')).toContainText('checkout');
    await expect(page.getByTestId('top-tenants')).toContainText('dash-');
    await expect(page.getByTestId('instances').locator('tbody tr')).toHaveCount(1);
    // The tenant's one bucket is active, under its name.
    await expect.poll(() => numberAttr(frame(page), 'data-active'), { timeout: 10_000 }).toBeGreaterThanOrEqual(1);
    await expect(page.getByTestId('active-buckets')).toContainText('dash-');
    await expect(page.getByTestId('tile-cache')).toContainText('key');
    // Each point's values are there on hover (a title over its column), and the legend is
    // beside the plot, not on it.
    await expect(page.getByTestId('chart-decisions').locator('svg title').last())
      .toHaveText(/^\d\d:\d\d:\d\d: [\d.kM]+ allowed\/s, [\d.kM]+ denied\/s$/);
    await expect(page.getByTestId('chart-latency').locator('svg title').last()).toContainText(/p99|no calls/);
    await expect(page.getByTestId('chart-decisions').locator('ul.legend li')).toHaveText(['allowed', 'denied']);

    // Ranges switch the stream.
    for (const range of ['1h', '24h', '5m']) {
      await page.getByTestId(`range-${range}`).click();
      await expect(page.getByTestId(`range-${range}`)).toHaveAttribute('aria-pressed', 'true');
      await expect(frame(page)).toHaveAttribute('data-range', range);
      await nextFrame(page);
    }
    await page.getByTestId('range-1h').click();
    await expect(frame(page)).toHaveAttribute('data-range', '1h');
    await saveScreenshot('dashboard-fleet-1h');

    // The tenant admin's view: their policies only, live as well.
    await page.goto('/account');
    await waitForHydration(page);
    await page.getByTestId('sign-out').click();
    await expect(page).toHaveURL(/\/sign-in$/);
    await signIn(page, email, ADMIN_PASSWORD);
    await page.goto(`/tenants/${tenant}/dashboard`);
    await waitForHydration(page);
    await expect(page.getByTestId('live-status')).toHaveAttribute('data-status', 'live');
    await expect(page.getByRole('navigation', { name: 'Tenant' }).getByRole('link', { name: 'Dashboard' }))
      .toHaveAttribute('aria-current', 'page');
    await expect.poll(decided, { timeout: 5_000 }).toBeGreaterThan(0);
    await saveScreenshot('dashboard-tenant-1');
    await nextFrame(page);
    await expect(page.getByTestId('top-policies')).toContainText('checkout');
    await expect(page.getByTestId('instances')).toHaveCount(0);
    await expect(page.getByTestId('top-tenants')).toHaveCount(0);
    await saveScreenshot('dashboard-tenant-2');

    // The fleet is not theirs.
    const fleet = await page.request.get('/live/dashboard');
    expect(fleet.status()).toBe(403);
  } finally {
    await load.stop();
  }
  expect(load.seen.other, 'every check was answered 200 or 429').toBe(0);
  expect(load.seen.denied).toBeGreaterThan(0);
});

test("a tenant admin sees the tenant's most denied subjects and resets one's bucket from the dashboard", async ({
  page, browserErrors, saveScreenshot, request,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const tenant = JSON.parse(await serverFn(page, 'tenants/create', { name: unique('denied') })).id as string;
  const email = `${unique('denied-admin')}@example.com`;
  await serverFn(page, 'tenants/add_admin', { tenant, email, password: ADMIN_PASSWORD });
  await serverFn(page, 'rules/save', {
    tenant, id: null,
    body: { name: 'per-user', match: 'default', scope: 'subject', algorithm: 'gcra', limit: 1, period_ms: 3_600_000 },
  });
  const key = `sl_chk_${randomBytes(32).toString('hex')}`;
  await serverFn(page, 'keys/create', {
    tenant, kind: 'check', name: 'load',
    hash: createHash('sha256').update(key).digest('hex'), prefix: key.slice(0, 12),
  });
  const check = async (subject: string) => (await request.post('/v1/check', {
    headers: { 'X-API-Key': key },
    data: { route: 'GET /x', subject },
  })).status();
  // noisy: one admitted, then five denials; quiet: one admitted, one denied.
  const statuses: number[] = [];
  for (let i = 0; i < 6; i += 1) statuses.push(await check('noisy'));
  for (let i = 0; i < 2; i += 1) statuses.push(await check('quiet'));
  expect(statuses).toEqual([200, 429, 429, 429, 429, 429, 200, 429]);

  await page.goto('/account');
  await waitForHydration(page);
  await page.getByTestId('sign-out').click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await signIn(page, email, ADMIN_PASSWORD);
  await page.goto(`/tenants/${tenant}/dashboard`);
  await waitForHydration(page);
  // The live frame's table, read every 5 s from the fleet's summaries.
  const live = page.getByTestId('denied-subjects');
  await expect(live.locator('tbody tr').first()).toContainText('noisy', { timeout: 15_000 });
  await expect(live.locator('tbody tr').first()).toContainText('5');
  await expect(live.locator('tbody tr').nth(1)).toContainText('quiet');

  // The list to reset from, read on request; a reset asks first.
  await page.getByTestId('load-denied').click();
  const rows = page.getByTestId('reset-denied').locator('tbody tr');
  await expect(rows).toHaveCount(2);
  await expect(rows.first()).toContainText('per-user');
  await expect(rows.first()).toContainText('noisy');
  await rows.first().getByTestId('reset-denied-0').click();
  await expect(page.getByText("Clear noisy's bucket of per-user on every instance?")).toBeVisible();
  await saveScreenshot('dashboard-reset-denied');
  await page.getByTestId('reset-denied-0-confirm').click();
  await expect(page.getByTestId('reset-denied-outcome'))
    .toContainText('The bucket of subject noisy under per-user is cleared.');
  // noisy's next check is admitted again; quiet is still denied.
  expect(await check('noisy')).toBe(200);
  expect(await check('quiet')).toBe(429);
});
