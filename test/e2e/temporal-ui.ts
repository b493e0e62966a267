/**
 * Drives the real Temporal web UI (the dev server's at TEMPORAL_UI_URL, UI 2.54.x) in headless
 * Chromium, the way an operator does: open a workflow, More Actions -> Send a Signal, pick the
 * signal name, paste the JSON input into the CodeMirror editor, Submit once.
 *
 * Selectors prefer roles and accessible names (what the operator sees), each with the UI's own
 * data-testid as a fallback. The UI renders its header twice (one copy hidden), so every CSS
 * fallback is limited to visible elements; role queries skip hidden ones by themselves.
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { type Browser, chromium, type Locator, type Page } from 'playwright-core';
import { REPO_ROOT, TEMPORAL_NAMESPACE, TEMPORAL_UI_URL } from '../support/temporal.js';

/** Debian's Chromium; never a browser downloaded by `playwright install`. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** Screenshots and other artifacts (git-ignored). */
export const ARTIFACTS_DIR = path.join(REPO_ROOT, 'test-output');
/** The first page load compiles and fetches the whole UI bundle: be generous. */
export const UI_TIMEOUT_MS = 60_000;

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** The UI's settings; signals can only be sent from it when write actions are enabled. */
export interface UiSettings {
  Version: string;
  DisableWriteActions: boolean;
  WorkflowSignalDisabled: boolean;
  /** The codec server the UI calls (`--ui-codec-endpoint`); empty without one. */
  Codec: { Endpoint: string };
}

export async function uiSettings(uiUrl = TEMPORAL_UI_URL): Promise<UiSettings> {
  const response = await fetch(`${uiUrl}/api/v1/settings`);
  if (!response.ok) throw new Error(`GET /api/v1/settings answered ${response.status}`);
  return (await response.json()) as UiSettings;
}

/** Workflow ids such as `reconcile/<workflowId>/<step>` hold slashes: the UI takes them encoded. */
export function workflowUrl(
  workflowId: string,
  namespace = TEMPORAL_NAMESPACE,
  uiUrl = TEMPORAL_UI_URL,
): string {
  return `${uiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/** Opens the workflow's page and waits until its heading names it (the UI then redirects to the run). */
export async function openWorkflow(
  page: Page,
  workflowId: string,
  uiUrl = TEMPORAL_UI_URL,
): Promise<void> {
  await page.goto(workflowUrl(workflowId, TEMPORAL_NAMESPACE, uiUrl), { timeout: UI_TIMEOUT_MS });
  const heading = page
    .getByTestId('workflow-id-heading')
    .filter({ visible: true })
    .or(page.getByRole('heading', { level: 1, name: workflowId }))
    .first();
  await heading.waitFor({ timeout: UI_TIMEOUT_MS });
  // The heading also holds a (hidden) "Click to copy content" tooltip: compare whole words.
  const shown = ((await heading.textContent()) ?? '').trim();
  if (!shown.split(/\s+/).includes(workflowId)) {
    throw new Error(`the UI shows workflow "${shown}", expected "${workflowId}"`);
  }
}

/** More Actions -> Send a Signal; returns the open "Send a Signal" dialog. */
export async function openSignalForm(page: Page): Promise<Locator> {
  const moreActions = page
    .getByRole('button', { name: 'More Actions' })
    .or(page.locator('button[aria-controls="workflow-actions"]').filter({ visible: true }))
    .first();
  await moreActions.click({ timeout: UI_TIMEOUT_MS });
  const item = page
    .getByRole('menuitem', { name: 'Send a Signal' })
    .or(page.getByTestId('signal-button').filter({ visible: true }))
    .first();
  await item.click({ timeout: UI_TIMEOUT_MS });
  const dialog = page
    .getByRole('dialog', { name: 'Send a Signal' })
    .or(page.getByTestId('signal-confirmation-modal').filter({ visible: true }))
    .first();
  await dialog.waitFor({ timeout: UI_TIMEOUT_MS });
  return dialog;
}

/**
 * Sets the signal name. The UI lists the signals the workflow declares (it asks the running
 * worker for the workflow's definitions); picks `name` there, else "Custom" and types it.
 * Resolves to the listed option's text (the name and the handler's description), or undefined
 * when the signal was not listed.
 */
export async function chooseSignal(dialog: Locator, name: string): Promise<string | undefined> {
  const select = dialog.getByTestId('signal-select-button');
  const customInput = dialog
    .getByLabel('Signal name', { exact: true })
    .or(dialog.getByTestId('signal-name'));
  // With no definitions to list the UI shows the text input straight away.
  await select.or(customInput).first().waitFor({ timeout: UI_TIMEOUT_MS });
  if (await select.isVisible()) {
    await select.click();
    // "Custom" is always the first option: once it shows, the list is complete.
    const custom = dialog.getByRole('option', { name: /^\s*Custom\b/ });
    await custom.waitFor({ timeout: UI_TIMEOUT_MS });
    const listed = dialog
      .getByRole('option')
      .filter({ hasText: new RegExp(`^\\s*${name}(\\s|$)`) });
    if ((await listed.count()) > 0) {
      const text = ((await listed.first().textContent()) ?? '').trim();
      await listed.first().click();
      await expectSignalName(select, name);
      return text;
    }
    await custom.click();
  }
  const input = customInput.first();
  await input.fill(name);
  await expectSignalName(input, name);
  return undefined;
}

/** Fails unless the form shows `name` as the signal name (the select's button or the text input). */
async function expectSignalName(field: Locator, name: string): Promise<void> {
  const input = (await field.evaluate((node) => node.tagName === 'INPUT'))
    ? field
    : field.locator('input');
  const shown = await input.inputValue();
  if (shown !== name) throw new Error(`the signal name field holds "${shown}", not "${name}"`);
}

/**
 * Pastes `text` into the "Data" editor the way an operator does: it goes to the system clipboard,
 * then Ctrl/Cmd+V into the focused editor (a real paste event, not `fill`). Fails unless the
 * editor then holds exactly `text`, character for character: that is what the next Submit sends
 * without reformatting it first.
 */
export async function pasteSignalInput(dialog: Locator, text: string): Promise<void> {
  const page = dialog.page();
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], {
    origin: new URL(page.url()).origin,
  });
  // Runs in the page; this file is type-checked without the DOM library.
  await page.evaluate(
    (value) =>
      (
        globalThis as unknown as {
          navigator: { clipboard: { writeText(text: string): Promise<void> } };
        }
      ).navigator.clipboard.writeText(value),
    text,
  );
  const editor = dialog
    .getByRole('textbox', { name: 'Data' })
    .or(dialog.locator('.cm-content[contenteditable="true"]'))
    .first();
  await editor.click();
  await editor.press('ControlOrMeta+A');
  await editor.press('Delete');
  await editor.press('ControlOrMeta+V');
  const typed = await editor.evaluate((node) =>
    [...node.querySelectorAll('.cm-line')].map((line) => line.textContent ?? '').join('\n'),
  );
  if (typed !== text) {
    throw new Error(
      `the signal input editor holds ${JSON.stringify(typed)}, not the pasted ${JSON.stringify(text)}`,
    );
  }
}

/**
 * Clicks Submit once and waits for the UI's "Workflow signaled." notice and for the dialog to
 * close. Never clicks again: a click the UI swallows (it reformats single-line JSON on that
 * click, the dialog grows and the click is lost) fails here instead of being hidden.
 */
export async function submitSignal(page: Page, dialog: Locator): Promise<void> {
  const submit = dialog
    .getByRole('button', { name: 'Submit', exact: true })
    .or(dialog.getByTestId('confirm-modal-button'))
    .first();
  await submit.click({ timeout: UI_TIMEOUT_MS });
  await page.getByText('Workflow signaled.').first().waitFor({ timeout: UI_TIMEOUT_MS });
  await dialog.waitFor({ state: 'hidden', timeout: UI_TIMEOUT_MS });
}

/** Saves a full-window PNG under test-output/ and returns its path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  await mkdir(ARTIFACTS_DIR, { recursive: true });
  const file = path.join(ARTIFACTS_DIR, name);
  await page.screenshot({ path: file });
  return file;
}

/**
 * Opens the workflow page's User Metadata tab, where the UI shows the run's Current Details (what
 * the workflow set with `setCurrentDetails`), and waits until it shows `text`.
 */
export async function showCurrentDetails(page: Page, text: string): Promise<void> {
  const tab = page
    .getByRole('tab', { name: 'User Metadata' })
    .or(page.getByRole('link', { name: 'User Metadata' }))
    .or(page.getByText('User Metadata', { exact: true }).filter({ visible: true }))
    .first();
  await tab.click({ timeout: UI_TIMEOUT_MS });
  // The UI renders the details' Markdown in a sandboxed frame: look in every frame.
  const deadline = Date.now() + UI_TIMEOUT_MS;
  for (;;) {
    for (const frame of page.frames()) {
      if (
        await frame
          .getByText(text)
          .first()
          .isVisible()
          .catch(() => false)
      )
        return;
    }
    if (Date.now() > deadline) throw new Error(`the User Metadata tab does not show "${text}"`);
    await page.waitForTimeout(250);
  }
}
