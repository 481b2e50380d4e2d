// Accounts beyond a password: a tenant's admins adding another, everyone's list of sessions
// with "sign out the others", and an operator deleting a user. The pages' own actions are
// taken with the keyboard alone (Tab, typing and Enter), after signing in.
import {
  test, expect, waitForHydration, signIn, signedInAsNewTenantAdmin, tenantWithAdmin, serverFn, tabTo,
  unique, ADMIN_PASSWORD, OPERATOR, OPERATOR_PASSWORD,
} from './fixtures';

test('a tenant admin adds another admin of their tenant and signs out their other session, with the keyboard alone', async ({
  page, browser, browserErrors,
}) => {
  void browserErrors;
  const t = await signedInAsNewTenantAdmin(page, 'admins');
  // The same admin, signed in on another device.
  const elsewhere = await (await browser.newContext()).newPage();
  await signIn(elsewhere, t.email, ADMIN_PASSWORD);

  await page.goto(`/tenants/${t.id}/admins`);
  await waitForHydration(page);
  await expect(page.getByRole('link', { name: 'Admins', exact: true }).first()).toBeVisible();
  const rows = page.getByTestId('admin-row');
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toHaveAttribute('data-email', t.email);
  // Both pages read right from the server alone, with no script.
  const noScript = await browser.newContext({ javaScriptEnabled: false });
  await noScript.addCookies(await page.context().cookies());
  const plain = await noScript.newPage();
  await plain.goto(new URL(`/tenants/${t.id}/admins`, page.url()).toString());
  await expect(plain.locator(`tr[data-email="${t.email}"]`)).toContainText('enabled');
  await plain.goto(new URL('/account', page.url()).toString());
  await expect(plain.getByTestId('session-row')).toHaveCount(2);
  await noScript.close();

  // Tab to the form, type, Enter: the new admin is listed.
  const second = `${unique('second')}@example.com`;
  await tabTo(page, page.getByLabel('Email'), 40);
  await page.keyboard.type(second);
  await page.keyboard.press('Tab');
  await expect(page.getByLabel('Initial password')).toBeFocused();
  await page.keyboard.type(ADMIN_PASSWORD);
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('admin-added')).toHaveText(`Added ${second}.`);
  await expect(rows).toHaveCount(2);
  await expect(page.locator(`tr[data-email="${second}"]`)).toBeVisible();
  // And can sign in to the same tenant.
  const newcomer = await (await browser.newContext()).newPage();
  await signIn(newcomer, second, ADMIN_PASSWORD);
  const [allowed, said] = await serverFn(newcomer, 'rules/list', { tenant: t.id });
  expect(allowed, said).toBe(true);
  await newcomer.context().close();

  // The account page lists both sessions of the first admin, this one marked.
  await page.goto('/account');
  await waitForHydration(page);
  const sessions = page.getByTestId('session-row');
  await expect(sessions).toHaveCount(2);
  await expect(page.locator('tr[data-testid="session-row"][data-current="true"]')).toHaveCount(1);
  await expect(page.locator('tr[data-testid="session-row"][data-current="true"]')).toContainText('this session');
  await tabTo(page, page.getByTestId('sign-out-others'), 40);
  await page.keyboard.press('Enter');
  // The question takes the focus; Enter answers it.
  await expect(page.getByTestId('sign-out-others-confirm')).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('others-signed-out')).toHaveText('1 other session ended.');
  await expect(sessions).toHaveCount(1);

  // The other device's next action is refused; this one goes on.
  const [stillIn, answer] = await serverFn(elsewhere, 'rules/list', { tenant: t.id });
  expect(stillIn, answer).toBe(false);
  expect(answer).toContain('Unauthorized');
  const [here, body] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect(here, body).toBe(true);
  await elsewhere.context().close();
});

test('an operator deletes a signed-in user with the keyboard alone, and their own row offers nothing', async ({
  page, browser, browserErrors,
}) => {
  void browserErrors;
  await signIn(page, OPERATOR, OPERATOR_PASSWORD);
  const t = await tenantWithAdmin(page, unique('deleted'));
  const elsewhere = await (await browser.newContext()).newPage();
  await signIn(elsewhere, t.email, ADMIN_PASSWORD);

  await page.goto('/users');
  await waitForHydration(page);
  const own = page.locator(`tr[data-email="${OPERATOR}"]`);
  await expect(own).toContainText('you (see Account)');
  await expect(own.getByRole('button')).toHaveCount(0);
  const noScript = await browser.newContext({ javaScriptEnabled: false });
  await noScript.addCookies(await page.context().cookies());
  const plain = await noScript.newPage();
  await plain.goto(new URL('/users', page.url()).toString());
  await expect(plain.locator(`tr[data-email="${t.email}"]`).getByTestId('delete-user')).toBeVisible();
  await noScript.close();

  const row = page.locator(`tr[data-email="${t.email}"]`);
  await tabTo(page, row.getByTestId('delete-user'), 400);
  await page.keyboard.press('Enter');
  await expect(row).toContainText(`Delete ${t.email} for good?`);
  await expect(row.getByTestId('delete-user-confirm')).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('user-deleted')).toBeVisible();
  await expect(row).toHaveCount(0);

  // The deleted user's session has ended, and their password signs in no more.
  const [allowed, said] = await serverFn(elsewhere, 'rules/list', { tenant: t.id });
  expect(allowed, said).toBe(false);
  expect(said).toContain('Unauthorized');
  await elsewhere.goto('/sign-in');
  await waitForHydration(elsewhere);
  await elsewhere.getByLabel('Email').fill(t.email);
  await elsewhere.getByLabel('Password').fill(ADMIN_PASSWORD);
  await elsewhere.getByLabel('Password').press('Enter');
  await expect(elsewhere.getByTestId('sign-in-error')).toContainText('wrong email or password');
  await elsewhere.context().close();

  // The tenant's audit log says so in words.
  await page.goto(`/tenants/${t.id}/audit`);
  await expect(page.getByTestId('audit-table')).toContainText(`deleted ${t.email}; 1 session ended`);
});
