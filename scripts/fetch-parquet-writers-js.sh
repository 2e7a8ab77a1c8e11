#!/usr/bin/env bash
# Fetches two Parquet writers for Node.js into
# third_party_assets/parquet-writers-js/ under the repository root: DuckDB
# (the npm package @duckdb/node-api and, through npm's optional
# dependencies, the prebuilt DuckDB library for this platform), and the
# Rust parquet crate compiled to WebAssembly (parquet-wasm, fed by
# apache-arrow), which writes what DuckDB does not: data pages v2,
# DELTA_BYTE_ARRAY, REQUIRED columns. The Parquet tests write their files
# with them (tests/tools/parquet_writer.mjs), writers independent of
# trellis's reader, and docs/performance.md makes its Parquet shard with
# DuckDB.
#
# Idempotent: does nothing when the package is already there. Works from any
# directory. Needs npm (and network access to the npm registry).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/third_party_assets/parquet-writers-js"
packages=(@duckdb/node-api@1.5.6-r.1 parquet-wasm@0.7.1 apache-arrow@21.2.0)
# The last package npm installs, present once all are.
entry="node_modules/parquet-wasm/package.json"

if [[ -s "${dest}/${entry}" ]]; then
  echo "parquet-writers-js already present in ${dest}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm not found; install Node.js/npm (e.g. apt-get install npm)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
echo "Fetching ${packages[*]} from the npm registry..."
# Fail fast without a network: the tests call this and then skip.
(cd "${work}" && npm install --silent --no-save --no-audit --no-fund \
  --fetch-retries=0 --fetch-timeout=30000 --prefix "${work}/package" \
  "${packages[@]}" >&2)
if [[ ! -s "${work}/package/${entry}" ]]; then
  echo "error: npm did not install ${packages[*]}" >&2
  exit 1
fi
# Publish by one rename, so an interrupted run never looks complete; of
# tests fetching side by side the first complete copy wins (rename(2) does
# not replace a non-empty folder).
mkdir -p "$(dirname "${dest}")"
staged="$(mktemp -d "${dest}.XXXXXX")"
trap 'rm -rf "${work}" "${staged}"' EXIT
rmdir "${staged}"
mv "${work}/package" "${staged}"
if mv -T "${staged}" "${dest}" 2>/dev/null; then
  echo "parquet-writers-js written to ${dest}"
elif [[ -s "${dest}/${entry}" ]]; then
  echo "parquet-writers-js already present in ${dest} (fetched alongside)"
else
  echo "error: could not publish ${dest}" >&2
  exit 1
fi
