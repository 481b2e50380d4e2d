import { test, expect, waitForHydration } from './fixtures';

test('the console page is server-rendered, hydrates, and a server function round-trips', async ({
  page,
  browserErrors,
  saveScreenshot,
}) => {
  // With JavaScript's effects not yet run, the server-rendered HTML already has the status.
  const response = await page.goto('/');
  expect(response?.status()).toBe(200);
  await expect(page.getByTestId('status-mode')).toHaveText('embedded');
  await expect(page.getByTestId('status-ready')).toHaveText('ready');

  await waitForHydration(page);
  await expect(page.getByTestId('hydration')).toHaveText('');
  const firstReading = await page.getByTestId('status-checked-at').getAttribute('data-ms');

  // A click only works once hydrated; it calls the server function over HTTP.
  const [request] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith('/api/status') && r.method() === 'POST'),
    page.getByTestId('refresh-status').click(),
  ]);
  const reply = await request.response();
  expect(reply?.status()).toBe(200);
  const body = await reply!.json();
  expect(body.mode).toBe('embedded');
  await expect(page.getByTestId('status-checks')).toHaveText('readings: 2');
  // The page now shows exactly the reading that this round trip returned.
  await expect(page.getByTestId('status-checked-at')).toHaveAttribute('data-ms', String(body.checked_at_ms));
  expect(String(body.checked_at_ms)).not.toBe(firstReading);
  await expect(page.getByTestId('status-checked-at')).toHaveText(/^\d\d:\d\d:\d\d\.\d{3} UTC$/);
  await saveScreenshot('home');
  expect(browserErrors).toEqual([]);
});

test('navigation between pages happens in the browser after hydration', async ({
  page,
  browserErrors,
  saveScreenshot,
}) => {
  await page.goto('/');
  await waitForHydration(page);
  // A full page load would lose this marker; client-side routing keeps it.
  await page.evaluate(() => ((window as unknown as { sluiceMarker: number }).sluiceMarker = 42));
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await expect(page.getByRole('heading', { name: 'Sign in' })).toBeVisible();
  const marker = await page.evaluate(() => (window as unknown as { sluiceMarker?: number }).sluiceMarker);
  expect(marker).toBe(42);
  await expect(page.getByLabel('Email')).toBeVisible();
  await saveScreenshot('sign-in');
  expect(browserErrors).toEqual([]);
});
