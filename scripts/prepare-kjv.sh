#!/usr/bin/env bash
# Prepares the default corpus: the King James Bible (Debian's bible-kjv),
# one document per book, tokenized into data_cache/kjv-<tokenizer>.h5.
# Usage: scripts/prepare-kjv.sh [byte|gpt2]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tokenizer="${1:-byte}"
out="data_cache/kjv-${tokenizer}.h5"
if [ -f "$out" ]; then
  echo "prepare-kjv: $out exists"
  exit 0
fi
if ! command -v bible >/dev/null 2>&1; then
  echo "prepare-kjv: the 'bible' command is missing; run scripts/install-deps.sh" >&2
  exit 1
fi
mkdir -p data_cache/kjv
if [ ! -f data_cache/kjv/.done ]; then
  # One text file per book, in canonical order: `bible -f` prefixes each
  # verse with its reference ("Ge1:1 In the beginning ...").
  bible -f gen1:1-rev22:21 | awk '
    /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ / {
      match($0, /^[1-3]?[A-Za-z]+/); book = substr($0, 1, RLENGTH)
      if (book != last) { n++; last = book; file = sprintf("data_cache/kjv/%03d-%s.txt", n, book) }
      sub(/^[^ ]+ /, ""); print > file; next
    }
    NF { sub(/^ +/, ""); print >> file }'
  touch data_cache/kjv/.done
fi
if [ "$tokenizer" = gpt2 ]; then scripts/fetch-gpt2-assets.sh; fi
inputs=$(ls data_cache/kjv/*.txt | paste -sd, -)
build/bin/trellis-preprocess --input="$inputs" --output="$out" --tokenizer="$tokenizer"
