// The rules form and the rules file page with the keyboard alone: no click and no mouse, every
// step by Tab, Enter, typing and Escape, with the focus where the user needs it after each one.
import { test, expect, waitForHydration, signedInAsNewTenantAdmin, serverFn, tabTo } from './fixtures';

test('a rule is created, edited, cancelled and deleted with the keyboard alone, and the focus follows', async ({
  page, browserErrors,
}) => {
  const t = await signedInAsNewTenantAdmin(page, 'keyboard');
  await page.goto(`/tenants/${t.id}/rules`);
  await waitForHydration(page);

  // The first Tab reaches the skip link, which goes past the header.
  await page.keyboard.press('Tab');
  await expect(page.getByRole('link', { name: 'Skip to content' })).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.locator('main')).toBeFocused();
  // A few presses on, "Create a rule" takes the focus to the form's first field.
  await tabTo(page, page.getByTestId('new-rule-link'), 10);
  await page.keyboard.press('Enter');
  await expect(page.getByLabel('Name', { exact: true })).toBeFocused();

  await page.keyboard.type('payments');
  await page.keyboard.press('Tab');
  await expect(page.getByLabel('Applies to', { exact: true })).toBeFocused();
  await page.keyboard.press('Tab');
  await expect(page.getByLabel('Route', { exact: true })).toBeFocused();
  await page.keyboard.type('post /payments');
  await expect(page.getByTestId('route-normal')).toContainText('POST /payments');
  await tabTo(page, page.getByLabel('Limit', { exact: true }), 5);
  await page.keyboard.press('Control+A');
  await page.keyboard.type('3');
  // Enter in a field submits the form; the focus goes to what the page says about it.
  await page.keyboard.press('Enter');
  const saved = page.getByTestId('rule-saved');
  await expect(saved).toHaveText('Saved rule payments.');
  await expect(saved).toBeFocused();
  const row = page.getByTestId('rule-row').filter({ hasText: 'payments' });
  await expect(row).toContainText('POST /payments');
  await expect(row).toContainText('3 / 1 s');

  // Edit takes the focus to the form, filled in; Escape leaves the edit and gives the focus back.
  const edit = row.getByTestId('edit-rule');
  await tabTo(page, edit, 40, true);
  await page.keyboard.press('Enter');
  await expect(page.getByRole('heading', { name: 'Edit rule' })).toBeVisible();
  await expect(page.getByLabel('Name', { exact: true })).toBeFocused();
  await expect(page.getByLabel('Name', { exact: true })).toHaveValue('payments');
  await page.keyboard.press('Escape');
  await expect(page.getByRole('heading', { name: 'Create a rule' })).toBeVisible();
  await expect(page.getByLabel('Name', { exact: true })).toHaveValue('');
  await expect(edit).toBeFocused();

  // Edit again, change the limit, save.
  await page.keyboard.press('Enter');
  await expect(page.getByLabel('Name', { exact: true })).toBeFocused();
  await tabTo(page, page.getByLabel('Limit', { exact: true }), 8);
  await page.keyboard.press('Control+A');
  await page.keyboard.type('5');
  await page.keyboard.press('Enter');
  await expect(saved).toBeFocused();
  await expect(row).toContainText('5 / 1 s');

  // Delete asks first and its "Yes" takes the focus; Escape cancels and gives the focus back.
  const remove = row.getByTestId('delete-rule');
  await tabTo(page, remove, 40, true);
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('delete-rule-confirm')).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(remove).toBeFocused();
  await page.keyboard.press('Enter');
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('no-rules')).toBeVisible();
  // The row is gone: the focus is on the list's heading, not lost to the page.
  await expect(page.getByRole('heading', { name: 'Rules', exact: true })).toBeFocused();
  expect(browserErrors).toEqual([]);
});

test('a rules file is edited, previewed and applied with the keyboard alone', async ({ page, browserErrors }) => {
  void browserErrors;
  const t = await signedInAsNewTenantAdmin(page, 'keyboard-file');
  const [made, rule] = await serverFn(page, 'rules/save', {
    tenant: t.id, id: null,
    body: { name: 'search', match: 'exact', route: 'GET /search', scope: 'subject', algorithm: 'token_bucket', limit: 10, period_ms: 1000 },
  });
  expect(made, rule).toBe(true);
  await page.goto(`/tenants/${t.id}/rules/file`);
  await waitForHydration(page);

  // Tab into the file, go to its end and type a rule.
  const box = page.getByLabel('The rules (YAML)');
  await tabTo(page, box, 20);
  await expect(box).toHaveValue(/name: search/);
  await page.keyboard.press('Control+End');
  await page.keyboard.type('- name: fresh\n  match: prefix\n  route: GET /fresh\n  scope: tenant\n  algorithm: gcra\n  limit: 3\n  period_ms: 1000\n');
  // Preview is the next stop but one (after Download); Enter presses it.
  const preview = page.getByTestId('rules-file-preview');
  await tabTo(page, preview, 3);
  await page.keyboard.press('Enter');
  // The plan takes the focus (Preview is disabled while the server answers), and Apply is two
  // Shift+Tabs back, past "Discard edits".
  const plan = page.getByTestId('rules-file-plan');
  await expect(plan).toContainText('1 to create, 0 to update, 0 to delete, 1 unchanged');
  await expect(plan).toBeFocused();
  const apply = page.getByTestId('rules-file-apply');
  await tabTo(page, apply, 2, true);
  await page.keyboard.press('Enter');
  const applied = page.getByTestId('rules-file-applied');
  await expect(applied).toContainText('Applied: 1 to create, 0 to update, 0 to delete, 1 unchanged');
  await expect(applied).toBeFocused();
  const [, after] = await serverFn(page, 'rules/list', { tenant: t.id });
  expect((JSON.parse(after) as { name: string }[]).map((r) => r.name).sort()).toEqual(['fresh', 'search']);
});
