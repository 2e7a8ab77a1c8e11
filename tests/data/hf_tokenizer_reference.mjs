// Reference encodings for the hf tokenizer tests, from Hugging Face's
// JavaScript tokenizer.json implementation (@huggingface/tokenizers, which
// scripts/fetch-tokenizers-js.sh puts in third_party_assets/tokenizers-js).
//
// Usage: node hf_tokenizer_reference.mjs PACKAGE_DIR TOKENIZER_JSON [MODE]
//          < in.json > out.json
//   in.json:  a JSON array of strings
//   out.json: a JSON array of {"ids": [...], "special_ids": [...],
//             "decoded": "..."}, one per input: ids without special tokens,
//             special_ids with the post-processor's, decoded = decode(ids)
//   MODE "time": instead prints {"tokens": N, "seconds": S}, the time of
//             encoding every input once (after one warm-up pass).
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [packageDir, tokenizerPath, mode] = process.argv.slice(2);
if (!packageDir || !tokenizerPath) {
  process.stderr.write(
      'usage: node hf_tokenizer_reference.mjs PACKAGE_DIR TOKENIZER_JSON\n');
  process.exit(2);
}
const module = await import(
    pathToFileURL(path.resolve(packageDir, 'dist/tokenizers.mjs')).href);
const tokenizer = new module.Tokenizer(
    JSON.parse(fs.readFileSync(tokenizerPath, 'utf8')),
    {clean_up_tokenization_spaces: false});
const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
const encode = (text, special) =>
    tokenizer.encode(text, {add_special_tokens: special}).ids;

if (mode === 'time') {
  for (const text of texts) encode(text, false);
  const start = process.hrtime.bigint();
  let tokens = 0;
  for (const text of texts) tokens += encode(text, false).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  process.stdout.write(JSON.stringify({tokens, seconds}) + '\n');
} else {
  const lines = texts.map((text) => {
    const ids = encode(text, false);
    return JSON.stringify({
      ids,
      special_ids: encode(text, true),
      decoded: tokenizer.decode(ids, {skip_special_tokens: false}),
    });
  });
  process.stdout.write('[\n' + lines.join(',\n') + '\n]\n');
}
