// Writes Parquet files with two writers independent of trellis's reader,
// which scripts/fetch-parquet-writers-js.sh puts in
// third_party_assets/parquet-writers-js: DuckDB (@duckdb/node-api) and the
// Rust parquet crate as WebAssembly (parquet-wasm, fed by apache-arrow).
// DuckDB writes only v1 data pages, PLAIN, dictionary and
// DELTA_LENGTH_BYTE_ARRAY values and nullable columns; parquet-wasm adds
// v2 data pages, DELTA_BYTE_ARRAY, dictionaries that fall back to another
// encoding within a column chunk, several pages a chunk, and REQUIRED
// columns.
//
// Usage: node parquet_writer.mjs PACKAGE_DIR OUT_DIR MODE [ARGS]
//   MODE tests: the files of the Parquet tests; prints a JSON manifest
//     (one object per file of text: name, row_groups, rows, nulls, codecs,
//     encodings, as DuckDB's parquet_metadata() reports them).
//   MODE seeds: the small files of tests/data/testdata/parquet/ (also the
//     fuzz corpus's seeds).
//   MODE shard MEGABYTES SOURCE_TEXT: one zstd file (DuckDB, PLAIN pages,
//     row groups of 8192 rows) of about MEGABYTES of English-like text,
//     documents of 1 to 8 KB made by a word-bigram chain over SOURCE_TEXT
//     (docs/performance.md).
// Beside each X.parquet whose `text` column is text goes X.jsonl: its
// non-null values in file order, read back by DuckDB and written as
// {"text": ...} lines.
import fs from 'node:fs';
import path from 'node:path';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const [packageDir, outDir, mode, ...rest] = process.argv.slice(2);
if (!packageDir || !outDir || !mode) {
  process.stderr.write(
      'usage: node parquet_writer.mjs PACKAGE_DIR OUT_DIR tests|seeds|shard\n');
  process.exit(2);
}
const require = createRequire(path.resolve(packageDir, 'package.json'));
const {DuckDBInstance} = require('@duckdb/node-api');
const arrow = require('apache-arrow');
const wasmDir = path.resolve(packageDir, 'node_modules/parquet-wasm/esm');
const wasm = await import(pathToFileURL(path.join(wasmDir, 'parquet_wasm.js')));
wasm.initSync(
    {module: fs.readFileSync(path.join(wasmDir, 'parquet_wasm_bg.wasm'))});
const instance = await DuckDBInstance.create(':memory:');
const db = await instance.connect();
// One thread keeps rows in insertion order and row groups as sized.
await db.run('SET threads = 1');
fs.mkdirSync(outDir, {recursive: true});

// A deterministic generator (mulberry32), so every run writes the same.
function random(seed) {
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const kWords = [
  'the', 'of', 'and', 'to', 'in', 'a', 'is', 'that', 'for', 'it', 'as',
  'was', 'with', 'be', 'by', 'on', 'not', 'he', 'this', 'are', 'or', 'his',
  'from', 'at', 'which', 'but', 'have', 'an', 'had', 'they', 'you', 'were',
  'river', 'mountain', 'engine', 'library', 'parquet', 'token', 'model',
  'café', 'naïve', 'Größe', 'élan', '東京', '中文', 'Привет', 'ελληνικά',
  '🙂', '👍🏽', 'tab\there', 'quote "marks"', 'back\\slash', 'line\nbreak',
  'para\n\ngraph', '  spaced  ', 'CRLF\r\n', 'x', '2024', '3.14', '—',
];

function words(rng, count) {
  const out = [];
  for (let i = 0; i < count; ++i) {
    out.push(kWords[Math.floor(rng() * kWords.length)]);
  }
  return out.join(rng() < 0.5 ? ' ' : '  ');
}

// The rows of a data set: strings, '' (no document) or null.
function dataSet(name, rows) {
  const rng = random(name.length * 1000 + rows);
  const distinct = Array.from({length: 30}, (_, i) => words(rng, 3 + i));
  const out = [];
  for (let i = 0; i < rows; ++i) {
    let text;
    if (name === 'prose') {
      text = i % 11 === 3 || (i >= 500 && i < 620) ? null
           : i % 97 === 5                            ? ''
           : i === 77                                ? words(rng, 5000)
                                                     : words(rng, 1 + (i * 37) % 90);
    } else if (name === 'repeated') {
      text = i % 5 === 0 ? null : distinct[(i * 7) % distinct.length];
    } else {  // mixed: a dictionary, unique rows, a row group of nulls
      text = i >= 2048 && i < 4096 ? null
           : i < 1500              ? distinct[i % distinct.length]
                                   : words(rng, 5 + i % 40);
    }
    out.push(text);
  }
  return out;
}

async function loadTable(table, rows) {
  const source = path.join(outDir, `${table}.source.jsonl`);
  fs.writeFileSync(
      source,
      rows.map((text, i) => JSON.stringify({i, text})).join('\n') + '\n');
  await db.run(`CREATE OR REPLACE TABLE ${table} AS SELECT i, text FROM
      read_json('${source}', columns = {i: 'BIGINT', text: 'VARCHAR'},
                format = 'newline_delimited') ORDER BY i`);
  fs.unlinkSync(source);
}

async function writeParquet(query, file, options) {
  await db.run(`COPY (${query}) TO '${file}' (FORMAT parquet, ${options})`);
}

// X.jsonl beside X.parquet: the non-null `text` values, in file order.
async function writeJsonl(file) {
  const jsonl = file.replace(/\.parquet$/, '.jsonl');
  await db.run(`COPY (SELECT text FROM read_parquet('${file}',
      file_row_number = true) WHERE text IS NOT NULL ORDER BY file_row_number)
      TO '${jsonl}' (FORMAT json)`);
}

async function describe(name, file) {
  const meta = await db.runAndReadAll(`SELECT row_group_id,
      row_group_num_rows, encodings, compression, stats_null_count
      FROM parquet_metadata('${file}') WHERE path_in_schema = 'text'`);
  const rows = meta.getRowObjectsJS();
  return {
    name,
    row_groups: rows.length,
    rows: rows.reduce((n, r) => n + Number(r.row_group_num_rows), 0),
    nulls: rows.reduce((n, r) => n + Number(r.stats_null_count ?? 0), 0),
    codecs: [...new Set(rows.map((r) => r.compression))],
    encodings: [...new Set(rows.flatMap((r) => r.encodings.split(', ')))],
  };
}

// The rows as an Arrow table of one Utf8 column, `text`, nullable or not.
function arrowTable(rows, nullable) {
  const type = new arrow.Utf8();
  const schema = new arrow.Schema([new arrow.Field('text', type, nullable)]);
  const vector = arrow.vectorFromArray(rows, type);
  return new arrow.Table(schema, vector.data.map((data) => new arrow.RecordBatch(
      schema, arrow.makeData({
        type: new arrow.Struct(schema.fields),
        length: data.length,
        nullCount: 0,
        children: [data],
      }))));
}

// parquet-wasm: pages of at most 16 KB, row groups of 2000 rows; with a
// dictionary, one of at most 4 KB, past which the chunk falls back to
// `encoding`.
async function writeWasm(rows, file, {version, encoding, dictionary, codec,
                                      nullable = true}, jsonl = true) {
  const properties = new wasm.WriterPropertiesBuilder()
      .setWriterVersion(wasm.WriterVersion[version])
      .setDictionaryEnabled(dictionary)
      .setDictionaryPageSizeLimit(4096)
      .setDataPageSizeLimit(16384)
      .setMaxRowGroupSize(2000)
      .setCompression(wasm.Compression[codec])
      .setEncoding(wasm.Encoding[encoding])
      .build();
  const table = wasm.Table.fromIPCStream(
      arrow.tableToIPC(arrowTable(rows, nullable), 'stream'));
  fs.writeFileSync(file, wasm.writeParquet(table, properties));
  if (jsonl) await writeJsonl(file);
}

async function writeWasmTests(manifest) {
  const prose = dataSet('prose', 5000);
  const repeated = dataSet('repeated', 5000);
  const codecs = ['UNCOMPRESSED', 'SNAPPY', 'GZIP', 'ZSTD'];
  const cases = [];
  for (const encoding of ['PLAIN', 'DELTA_LENGTH_BYTE_ARRAY',
                          'DELTA_BYTE_ARRAY']) {
    for (const codec of codecs) {
      cases.push([`wasm_v2_${encoding.toLowerCase()}_${codec.toLowerCase()}`,
                  prose, {version: 'V2', encoding, dictionary: false, codec}]);
    }
  }
  cases.push(
      ['wasm_v2_dictionary_snappy', repeated,
       {version: 'V2', encoding: 'DELTA_BYTE_ARRAY', dictionary: true,
        codec: 'SNAPPY'}],
      ['wasm_v2_dictionary_fallback_zstd', prose,
       {version: 'V2', encoding: 'PLAIN', dictionary: true, codec: 'ZSTD'}],
      ['wasm_v1_delta_byte_array_zstd', prose,
       {version: 'V1', encoding: 'DELTA_BYTE_ARRAY', dictionary: false,
        codec: 'ZSTD'}],
      ['wasm_v1_dictionary_fallback_gzip', prose,
       {version: 'V1', encoding: 'PLAIN', dictionary: true, codec: 'GZIP'}],
      ['wasm_v2_required_delta_byte_array_gzip',
       prose.filter((t) => t !== null),
       {version: 'V2', encoding: 'DELTA_BYTE_ARRAY', dictionary: false,
        codec: 'GZIP', nullable: false}],
      ['wasm_v1_required_plain_snappy', prose.filter((t) => t !== null),
       {version: 'V1', encoding: 'PLAIN', dictionary: false, codec: 'SNAPPY',
        nullable: false}]);
  for (const [name, rows, options] of cases) {
    const file = path.join(outDir, `${name}.parquet`);
    await writeWasm(rows, file, options);
    manifest.push(await describe(name, file));
  }
}

async function writeTests() {
  const manifest = [];
  for (const set of ['prose', 'repeated', 'mixed']) {
    await loadTable(set, dataSet(set, 5000));
    for (const version of ['V1', 'V2']) {
      for (const codec of ['uncompressed', 'snappy', 'gzip', 'zstd']) {
        const name = `${set}_${version.toLowerCase()}_${codec}`;
        const file = path.join(outDir, `${name}.parquet`);
        await writeParquet(`SELECT text FROM ${set} ORDER BY i`, file,
            `COMPRESSION '${codec}', PARQUET_VERSION '${version}', ` +
            `ROW_GROUP_SIZE 2048`);
        await writeJsonl(file);
        manifest.push(await describe(name, file));
      }
    }
  }
  for (const codec of ['brotli', 'lz4']) {
    await writeParquet('SELECT text FROM prose ORDER BY i',
        path.join(outDir, `codec_${codec}.parquet`), `COMPRESSION '${codec}'`);
  }
  await writeWasmTests(manifest);
  await writeTypes(path.join(outDir, 'types.parquet'));
  process.stdout.write(JSON.stringify(manifest) + '\n');
}

// Columns of other types, and a BLOB with bytes that are not UTF-8 in
// rows 3 and 7.
async function writeTypes(file) {
  await db.run(`COPY (SELECT i AS id, 'row ' || i AS text,
      {'a': i, 'b': 'x'} AS meta, ['p', 'q'] AS tags,
      CASE WHEN i IN (3, 7) THEN '\\xFF\\xFEbad'::BLOB
           ELSE ('raw ' || i)::BLOB END AS raw,
      (i / 8)::DECIMAL(18, 3) AS amount
      FROM range(10) t(i)) TO '${file}' (FORMAT parquet)`);
}

async function writeSeeds() {
  await loadTable('prose', dataSet('prose', 60).map(
      (t) => t === null ? t : Array.from(t).slice(0, 80).join("")));
  await loadTable('repeated', dataSet('repeated', 2100));
  const seeds = [
    ['prose', 'V1', 'snappy'], ['prose', 'V1', 'gzip'],
    ['prose', 'V2', 'zstd'], ['prose', 'V2', 'uncompressed'],
    ['repeated', 'V1', 'zstd'], ['repeated', 'V2', 'snappy'],
  ];
  for (const [set, version, codec] of seeds) {
    await writeParquet(`SELECT text FROM ${set} ORDER BY i`,
        path.join(outDir, `${set}_${version.toLowerCase()}_${codec}.parquet`),
        `COMPRESSION '${codec}', PARQUET_VERSION '${version}', ` +
        `ROW_GROUP_SIZE 2048`);
  }
  const short = dataSet('prose', 60).map(
      (t) => t === null ? t : Array.from(t).slice(0, 60).join(''));
  await writeWasm(short, path.join(outDir, 'wasm_v2_delta_byte_array_zstd.parquet'),
      {version: 'V2', encoding: 'DELTA_BYTE_ARRAY', dictionary: false,
       codec: 'ZSTD'}, false);
  await writeWasm(short.filter((t) => t !== null),
      path.join(outDir, 'wasm_v1_required_dictionary_gzip.parquet'),
      {version: 'V1', encoding: 'PLAIN', dictionary: true, codec: 'GZIP',
       nullable: false}, false);
  // A dictionary small enough to corrupt byte by byte.
  await writeParquet(`SELECT CASE WHEN i % 9 = 4 THEN NULL
      ELSE ['one', 'two words', 'café', '', '🙂'][i % 5 + 1] END AS text
      FROM range(200) t(i)`,
      path.join(outDir, 'dictionary_v1_snappy.parquet'),
      `COMPRESSION 'snappy'`);
  await writeTypes(path.join(outDir, 'types.parquet'));
}

// Documents of 1 to 8 KB from a word-bigram chain over `source`.
async function writeShard(megabytes, source) {
  const tokens = fs.readFileSync(source, 'utf8').split(/\s+/).filter(Boolean);
  const next = new Map();
  for (let i = 0; i + 1 < tokens.length; ++i) {
    if (!next.has(tokens[i])) next.set(tokens[i], []);
    next.get(tokens[i]).push(tokens[i + 1]);
  }
  const rng = random(7);
  const rowsFile = path.join(outDir, 'shard.source.jsonl');
  const out = fs.openSync(rowsFile, 'w');
  let word = tokens[0], bytes = 0, i = 0;
  while (bytes < megabytes * 1e6) {
    const target = 1000 + Math.floor(rng() * 7000);
    let doc = '';
    while (doc.length < target) {
      const followers = next.get(word) ?? tokens;
      word = followers[Math.floor(rng() * followers.length)];
      const gap = doc.length === 0 ? '' : rng() < 0.02 ? '\n\n' : ' ';
      doc += gap + word;
    }
    fs.writeSync(out, JSON.stringify({i: i++, text: doc}) + '\n');
    bytes += Buffer.byteLength(doc);
  }
  fs.closeSync(out);
  await db.run(`CREATE TABLE shard AS SELECT i, text FROM read_json(
      '${rowsFile}', columns = {i: 'BIGINT', text: 'VARCHAR'},
      format = 'newline_delimited') ORDER BY i`);
  fs.unlinkSync(rowsFile);
  const file = path.join(outDir, 'shard.parquet');
  await writeParquet('SELECT text FROM shard ORDER BY i', file,
      `COMPRESSION 'zstd', ROW_GROUP_SIZE 8192`);
  await writeJsonl(file);
  process.stdout.write(JSON.stringify(await describe('shard', file)) + '\n');
}

if (mode === 'tests') {
  await writeTests();
} else if (mode === 'seeds') {
  await writeSeeds();
} else if (mode === 'shard') {
  await writeShard(Number(rest[0]), rest[1]);
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
