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
