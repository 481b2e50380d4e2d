// The rules form's problems: said only where the user has been (a field changed, or the form
// sent), in the words and units of the field, and tied to the field for screen readers.
import { test, expect, waitForHydration, signedInAsNewTenantAdmin } from './fixtures';

test('the rules form says a problem once its field is touched or the form sent, in the unit picked, tied to its field', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  const t = await signedInAsNewTenantAdmin(page, 'forms');
  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);
  const name = page.getByLabel('Name', { exact: true });
  const limit = page.getByLabel('Limit', { exact: true });
  const per = page.getByLabel('Per', { exact: true });

  // Nothing typed yet: the empty name is not called a problem.
  await expect(page.getByTestId('problem-name')).toHaveText('');
  await expect(name).toHaveAttribute('aria-invalid', 'false');

  // A number that is only too big says so, not "must be a whole number"; the field is marked
  // invalid and described by its problem. The untouched name still says nothing.
  await limit.fill('99999999999999999999');
  await expect(page.getByTestId('problem-limit')).toHaveText('must be at most 1000000000');
  await expect(limit).toHaveAttribute('aria-invalid', 'true');
  await expect(limit).toHaveAccessibleDescription('must be at most 1000000000');
  await expect(page.getByTestId('problem-name')).toHaveText('');
  await limit.fill('10');
  await expect(limit).toHaveAttribute('aria-invalid', 'false');

  // A period is refused in the unit picked (hours), not in milliseconds, however big it is.
  await page.getByLabel('Period unit').selectOption({ label: 'hours' });
  for (const hours of ['9000', '99999999999999999999']) {
    await per.fill(hours);
    await expect(page.getByTestId('problem-period')).toHaveText('must be from 1 ms to 366 days: at most 8784 hours');
    await expect(per).toHaveAccessibleDescription(/at most 8784 hours/);
  }
  await per.fill('1');
  await expect(page.getByTestId('problem-period')).toHaveText('');

  // Sending the form shows every problem left and takes the focus to the first of them.
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('problem-name')).not.toHaveText('');
  await expect(name).toBeFocused();
  await expect(name).toHaveAttribute('aria-invalid', 'true');
  const said = (await page.getByTestId('problem-name').textContent())!;
  await expect(name).toHaveAccessibleDescription(said);
  await expect(page.getByTestId('save-rule')).toBeDisabled();
  // Fixed, it saves.
  await name.fill('forms');
  await page.getByLabel('Route', { exact: true }).fill('GET /forms');
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('rule-saved')).toHaveText('Saved rule forms.');
});

test('a concurrency rule is made in words of requests in flight and leases, and listed so', async ({
  page, browserErrors,
}) => {
  void browserErrors;
  const t = await signedInAsNewTenantAdmin(page, 'inflight');
  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);
  await page.getByLabel('Name', { exact: true }).fill('reports');
  await page.getByLabel('Route', { exact: true }).fill('GET /reports');
  await page.getByLabel('Penalty: denied requests still count').check();
  await page.getByLabel('Algorithm').selectOption('concurrency');
  // The limit is requests in flight, the period a lease's lifetime; no penalty, no burst.
  await expect(page.getByTestId('algorithm-about')).toContainText('at most limit requests in flight');
  const limit = page.getByLabel('In flight at once', { exact: true });
  const per = page.getByLabel('Leases end after', { exact: true });
  await expect(page.getByLabel('Limit', { exact: true })).toHaveCount(0);
  await expect(page.getByLabel('Penalty: denied requests still count')).toBeDisabled();
  await expect(page.getByLabel('Burst')).toBeDisabled();
  await limit.fill('1001');
  await expect(page.getByTestId('problem-limit')).toContainText('at most 1000 for concurrency');
  await limit.fill('20');
  await per.fill('30');
  await page.getByLabel('Period unit').selectOption({ label: 'seconds' });
  // It saves: the penalty box, ticked before it was disabled, is not sent (the server
  // refuses a concurrency rule with a penalty).
  await page.getByTestId('save-rule').click();
  await expect(page.getByTestId('rule-saved')).toHaveText('Saved rule reports.');
  const row = page.locator('tr[data-testid="rule-row"][data-name="reports"]');
  await expect(row).toContainText('20 in flight, leases up to 30 s');
  await expect(row).toContainText('Concurrency');
});
