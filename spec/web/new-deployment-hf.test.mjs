// New deployment → From Hugging Face against the project's stand-in Hub (spec/support/fake_hub.lua):
// a GGUF-only repo offers llama.cpp and Ollama, not vLLM or SGLang, with its choices and the GPU
// estimate, and picking llama.cpp opens the form with the choice's settings; a gated repo without a
// token says so and links to the Cluster defaults tab.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, startHub, browser, newPage, axe, signIn, assertClean, clusterEnv, saveHarnessSettings } from './support.mjs';

const env = clusterEnv();
let stack;
let hub;
let b;
before(async () => {
  if (!env) return;
  hub = await startHub();
  stack = await startStack({ provisioner: false, serveEnv: { HF_ENDPOINT: hub.url } });
  await saveHarnessSettings(stack);
  b = await browser();
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  if (hub) await hub.stop();
});

test('From Hugging Face: a GGUF repo offers llama.cpp and Ollama only; a gated repo without a token links to Cluster defaults',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'new-deployment-hf');
    await signIn(page, stack);
    await page.goto('/deployments/new');
    // step 1 is three choices, as tabs: Saved, Library, From Hugging Face (Library first when nothing is saved)
    const choices = page.getByRole('tablist', { name: 'What to run' });
    await choices.waitFor(); // shown once the recipe list is here (the opening tab depends on it)
    assert.deepEqual(await choices.getByRole('tab').allInnerTexts(), ['Saved', 'Library', 'From Hugging Face']);
    const libTab = choices.getByRole('tab', { name: 'Library' });
    assert.equal(await libTab.getAttribute('aria-selected'), 'true');
    assert.equal(await libTab.getAttribute('tabindex'), '0');
    assert.equal(await choices.getByRole('tab', { name: 'From Hugging Face' }).getAttribute('tabindex'), '-1');
    await page.getByRole('tabpanel', { name: 'Library' }).getByRole('button', { name: 'Use Smoke test' }).waitFor();
    await shot('pick-tabs');
    await axe(page, 'step 1 as tabs');
    // keyboard: arrow right moves to From Hugging Face, focus and panel with it; Home goes to Saved, End back
    await libTab.focus();
    await page.keyboard.press('ArrowRight');
    await choices.getByRole('tab', { name: 'From Hugging Face', selected: true }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'From Hugging Face');
    assert.equal(await page.getByRole('tabpanel', { name: 'Library' }).count(), 0, 'the Library panel is still shown');
    await page.keyboard.press('Home');
    await choices.getByRole('tab', { name: 'Saved', selected: true }).waitFor();
    await page.getByRole('tabpanel', { name: 'Saved' }).getByText('None yet').waitFor();
    await page.keyboard.press('End');
    await choices.getByRole('tab', { name: 'From Hugging Face', selected: true }).waitFor();
    const hf = page.getByRole('tabpanel', { name: 'From Hugging Face' });
    await hf.getByLabel('Repo id').waitFor();

    // keyboard only: type the repo id, Enter reads it
    await hf.getByLabel('Repo id').focus();
    await page.keyboard.type('bartowski/Llama-3.2-1B-Instruct-GGUF');
    await page.keyboard.press('Enter');
    const engines = hf.getByRole('list', { name: 'Engines that can run it' });
    await engines.waitFor();
    const names = await engines.locator(':scope > li strong').allInnerTexts();
    assert.deepEqual(names.sort(), ['Ollama', 'llama.cpp']);
    assert.match(await hf.innerText(), /formats: gguf/i);
    assert.match(await engines.innerText(), /GPU estimate: \d+ GPUs? per node/);
    // the choices (quantization files with sizes) are offered
    const choice = hf.getByLabel('llama.cpp choice');
    assert.ok((await choice.locator('option').count()) > 1, 'several quantization files to choose from');
    assert.match(await choice.locator('option').first().innerText(), /\d+(\.\d)? [GM]B/);
    // the engine's preselected choice is selected; another can be picked
    assert.match(await choice.inputValue(), /\.gguf$/);
    await choice.selectOption('Llama-3.2-1B-Instruct-Q2_K.gguf');
    await shot('gguf-engines');
    await axe(page, 'From Hugging Face with a GGUF repo');

    // llama.cpp with its preselected choice: the form shows the choice's settings from the recipe
    await hf.getByRole('button', { name: 'Use llama.cpp' }).click();
    await page.getByRole('group', { name: 'Partition' }).waitFor();
    assert.match(await page.locator('.picked').innerText(), /bartowski\/Llama-3\.2-1B-Instruct-GGUF with llama\.cpp/);
    assert.match(await page.locator('[data-field="inputs.hf_repo"]').innerText(), /recipe/);
    assert.equal(await page.getByLabel('hf_repo', { exact: true }).inputValue(), 'bartowski/Llama-3.2-1B-Instruct-GGUF');
    assert.equal(await page.getByLabel('hf_file', { exact: true }).inputValue(), 'Llama-3.2-1B-Instruct-Q2_K.gguf');
    await shot('gguf-form');
    await axe(page, 'the form for a Hugging Face repo');
    // the llama.cpp recipe asks for the longest walltime the partition allows (time_limit: max), so the
    // form opens with no walltime problem (its old fixed 24 h was above every harness partition's MaxTime)
    const tlErr = page.locator('[data-field="time_limit"] .field-error');
    // Review: the job script downloads that file from that repo
    await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
    assert.equal(await tlErr.count(), 0, 'a walltime problem for a recipe that asks for the partition\'s MaxTime');
    await page.getByRole('button', { name: 'Review' }).click();
    const script = await page.getByLabel('Job script (read-only)').innerText();
    assert.match(script, /bartowski\/Llama-3\.2-1B-Instruct-GGUF/);
    assert.match(script, /Llama-3\.2-1B-Instruct-Q2_K\.gguf/);
    await shot('gguf-review');
    await axe(page, 'Review for a Hugging Face repo');
    await page.getByRole('button', { name: 'Back to the settings' }).click();
    await page.getByRole('group', { name: 'Partition' }).waitFor();

    // a gated repo without a token: the message and the link to Cluster defaults
    await page.getByRole('button', { name: 'Back' }).click();
    // back on step 1, the choice made stays chosen
    await choices.getByRole('tab', { name: 'From Hugging Face', selected: true }).waitFor();
    await hf.getByLabel('Repo id').fill('meta-llama/Llama-3.1-8B-Instruct');
    await hf.getByRole('button', { name: 'Read the repo' }).click();
    const alert = hf.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /gated/i);
    const link = alert.getByRole('link', { name: 'Cluster defaults' });
    assert.equal(await link.getAttribute('href'), '/deployments?slurm=1&tab=defaults');
    await shot('gated');
    await axe(page, 'a gated repo without a token');
    await link.click();
    const sheet = page.getByRole('dialog', { name: 'Slurm connection' });
    await sheet.waitFor();
    assert.equal(await sheet.getByRole('tab', { name: 'Cluster defaults' }).getAttribute('aria-selected'), 'true');
    await shot('cluster-defaults');
    assertClean(rec);
  });
