import { test, expect, waitForHydration } from './fixtures';

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

  await page.getByTestId('sign-out').click();
  await expect(page).toHaveURL(/\/sign-in$/);
  // The old cookie no longer opens the page, even when replayed.
  await page.context().addCookies([session!]);
  await page.goto('/account');
  await expect(page.getByTestId('not-signed-in')).toBeVisible();
});
