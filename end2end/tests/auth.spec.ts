import {
  test, expect, waitForHydration, signIn, signedInAsNewTenantAdmin, tenantWithAdmin, serverFn, unique,
  ADMIN_PASSWORD, OPERATOR, OPERATOR_PASSWORD,
} from './fixtures';
import type { Page } from '@playwright/test';

const EMAIL = 'admin@localhost';
const PASSWORD = 'e2e operator password';

test('sign-in, a wrong password, and sign-out that really ends the session', async ({
  page,
  saveScreenshot,
}) => {
  await page.goto('/sign-in');
  await waitForHydration(page);

  // A wrong password gets a clear message and no session.
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('sign-in-error')).toContainText('wrong email or password');
  await saveScreenshot('sign-in-error');

  // The right one, with the keyboard: Enter submits.
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByLabel('Password').press('Enter');
  // An operator starts on the tenants page, and the navigation knows who is signed in.
  await expect(page).toHaveURL(/\/tenants$/);
  await expect(page.getByTestId('nav-account')).toHaveText(EMAIL);
  await page.getByTestId('nav-account').click();
  await expect(page).toHaveURL(/\/account$/);
  await expect(page.getByTestId('signed-in-as')).toContainText(`Signed in as ${EMAIL} (operator)`);
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === 'sluice_session');
  expect(session?.httpOnly).toBe(true);
  expect(session?.sameSite).toBe('Strict');
  await saveScreenshot('account');

  // Signed in, a full page load still knows the user.
  await page.reload();
  await expect(page.getByTestId('signed-in-as')).toContainText(EMAIL);

  // Once hydrated, sign-out goes to /sign-in. A click before that posts the form without
  // script: the server signs out and sends the browser back to this page, signed out (a run
  // in CI clicked there first and was left on /account).
  await waitForHydration(page);
  await page.getByTestId('sign-out').click();
  await expect(page).toHaveURL(/\/sign-in$/);
  // The old cookie no longer opens the page, even when replayed.
  await page.context().addCookies([session!]);
  await page.goto('/account');
  await expect(page.getByTestId('not-signed-in')).toBeVisible();
});

/** Opens `path`, which must send the page to sign-in, and signs in there as `email` with
 * `password`, which must be refused: the refusal's message, to check. */
async function signedOutThenRefused(page: Page, path: string, email: string, password: string) {
  await page.goto(path);
  await expect(page).toHaveURL(/\/sign-in/);
  await waitForHydration(page);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  return page.getByTestId('sign-in-error');
}

test('a tenant admin changes their password: the current one is needed, and the session elsewhere ends', async ({
  page, browser,
}) => {
  // No browserErrors here: the refused change is a 400 the browser logs, as intended.
  const t = await signedInAsNewTenantAdmin(page, 'password');
  // The same admin, signed in on another device.
  const elsewhere = await (await browser.newContext()).newPage();
  await signIn(elsewhere, t.email, ADMIN_PASSWORD);
  await elsewhere.goto(`/tenants/${t.id}/keys`);
  await expect(elsewhere.getByRole('heading', { name: 'Keys', exact: true })).toBeVisible();

  await page.goto('/account');
  await waitForHydration(page);
  await expect(page.getByTestId('session-row')).toHaveCount(2);
  const current = page.getByLabel('Current password');
  const fresh = page.getByLabel('New password');
  // Too short is said while typing; a wrong current password is refused and changes nothing.
  await fresh.fill('short');
  await expect(fresh).toHaveAccessibleDescription('at least 12 characters (5 so far)');
  const newPassword = 'a new and longer passphrase';
  await current.fill('not my password');
  await fresh.fill(newPassword);
  await page.getByTestId('change-password').click();
  await expect(page.getByTestId('password-error')).toContainText('is not your current password');
  await elsewhere.reload();
  await expect(elsewhere.getByRole('heading', { name: 'Keys', exact: true })).toBeVisible();

  // With the current password (Enter submits): changed, and the other session has ended.
  await current.fill(ADMIN_PASSWORD);
  await fresh.fill(newPassword);
  await fresh.press('Enter');
  await expect(page.getByTestId('password-changed')).toHaveText('Password changed; 1 other session ended.');
  // The list of sessions follows: only this one is left.
  await expect(page.getByTestId('session-row')).toHaveCount(1);
  await expect(page.getByTestId('session-row')).toHaveAttribute('data-current', 'true');
  await expect(current).toHaveValue('');
  // This session goes on.
  await page.goto(`/tenants/${t.id}/rules`);
  await expect(page.getByTestId('nav-account')).toHaveText(t.email);
  // The other one's next page sends it to sign in, where the old password no longer works.
  await expect(await signedOutThenRefused(elsewhere, `/tenants/${t.id}/keys`, t.email, ADMIN_PASSWORD))
    .toContainText('wrong email or password');
  await signIn(elsewhere, t.email, newPassword);
  await elsewhere.context().close();
});

test('an operator disables a signed-in user, whose next action is refused, and a reset password works once shown', async ({
  page, browser, browserErrors,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('disabled'));
  const elsewhere = await (await browser.newContext()).newPage();
  await signIn(elsewhere, t.email, ADMIN_PASSWORD);
  await elsewhere.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(elsewhere);

  await page.goto('/users');
  await waitForHydration(page);
  const row = page.locator(`tr[data-email="${t.email}"]`);
  await expect(row.getByTestId('user-state')).toHaveText('enabled');
  await row.getByTestId('disable-user').click();
  await expect(row).toContainText('their sessions end now');
  await row.getByTestId('disable-user-confirm').click();
  await expect(row).toHaveAttribute('data-state', 'disabled');
  await expect(row.getByTestId('user-state')).toContainText('disabled');

  // The user's next action, from the page already open, is refused; a new page asks for a
  // sign-in, which says the account is disabled.
  const [allowed, said] = await serverFn(elsewhere, 'rules/list', { tenant: t.id });
  expect(allowed, said).toBe(false);
  expect(said).toContain('Unauthorized');
  await expect(await signedOutThenRefused(elsewhere, `/tenants/${t.id}/keys`, t.email, ADMIN_PASSWORD))
    .toContainText('disabled');

  // Enabled again, then a reset: the new password is shown once and signs in.
  await row.getByTestId('enable-user').click();
  await row.getByTestId('enable-user-confirm').click();
  await expect(row).toHaveAttribute('data-state', 'enabled');
  await row.getByTestId('reset-user-password').click();
  await row.getByTestId('reset-user-password-confirm').click();
  await expect(page.getByTestId('password-reset')).toContainText(`New password for ${t.email}`);
  const password = (await page.getByTestId('reset-password-value').textContent())!;
  expect(password.length).toBeGreaterThanOrEqual(12);
  await signIn(elsewhere, t.email, password);
  await elsewhere.context().close();
});
