#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: its dry run must pass every section
# and leave a log with each section's header and valid JSON results; a
# section that fails or outlasts its time must not stop the check, which
# must then exit nonzero naming those sections, and a timed-out section's
# processes must be gone; without --dry-run it must stop after the system
# section and fail, saying why, instead of passing with nothing measured.
#
#   gpu_check_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
root="$1"
build="$2"
work="$(mktemp -d /var/tmp/trellis-gpu-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. The dry run, from the build.
rc=0
OUT= "$root/scripts/gpu-check.sh" --dry-run --bin "$build/bin" \
  --log-dir "$work/logs" --results "$work/results" >"$work/stdout" 2>&1 || rc=$?
log="$work/logs/$(date -u +%Y-%m-%d)-cpu-dry-run.log"
[ -f "$log" ] || { cat "$work/stdout"; fail "no log $log"; }
cmp -s "$log" "$work/stdout" || fail "the log differs from what was printed"
[ "$rc" -eq 0 ] || { cat "$log"; fail "the dry run exited $rc"; }
for section in system tests memcheck llama generate bench:tiny torch:tiny \
    llmc:tiny attention torch-sdpa variants goals; do
  grep -q "^==== $section (limit [0-9]* s)" "$log" || fail "no header of $section"
  grep -q "^---- $section: ok in [0-9]* s" "$log" || fail "$section did not pass"
done
grep -q '^gpu-check: every section passed$' "$log" || fail "no closing line"
grep -q '== cuda_tests' "$log" || fail "the tests section ran no cuda_tests"
grep -q -- '-np 8 .*cuda_layout_equivalence_mpi_test' "$log" ||
  fail "the tests section did not start the 8-rank layout test"
grep -q '^| goal | result | measured |' "$log" || fail "no goals table"
# The variants ran beside the preset as benched, each with its flags.
grep -q '^| (as benched) | [0-9.]* | [0-9]* | .* | 1.00x |$' "$log" ||
  fail "no variants row of the preset as benched"
grep -q '^| --gemm_autotune | [0-9.]* | [0-9]* |' "$log" ||
  fail "no variants row with --gemm_autotune"
# The planner's step for the micro-batch variant, from the bench's table.
grep -q '^plan: dp1.tp1.pp1/1f1b/v1/mbs32/z0/none predicted [0-9.]* ms, measured [0-9.]* ms' "$log" ||
  fail "no plan line for the --micro_batch_size=32 variant"
grep -q '^fastest of tiny that ran: .*, [0-9]* tokens/s$' "$log" ||
  fail "no line naming the fastest variant"
# llm.c, the peer, runs only on a GPU: its section says so in a dry run.
grep -q '^skipped: llm.c runs only on a GPU' "$log" || fail "llmc did not skip"
# The Llama sections ran the converted model through trellis-eval and
# trellis-generate and compared them.
grep -q '^== trellis-eval --device=cpu' "$log" || fail "llama ran no trellis-eval"
grep -Eq '^(ok: trellis-eval|trellis-eval --device=cpu: loss [0-9.]+; PyTorch reference skipped)' \
  "$log" || fail "llama compared no loss"
grep -q '^ok: [1-9][0-9]* greedy tokens equal' "$log" || fail "generate compared no tokens"
for f in bench-tiny.json attention.json sdpa.json torch-tiny.json llmc-tiny.json; do
  python3 -m json.tool "$work/results/$f" >/dev/null || fail "$f is not JSON"
done
python3 - "$work/results" <<'EOF' || fail "unexpected results"
import json, sys
d = sys.argv[1]
att = json.load(open(f"{d}/attention.json"))
assert [p["path"] for p in att["shapes"][0]["paths"]] == ["cpu"], att
assert att["shapes"][0]["paths"][0]["forward_ms"] > 0
assert len(att["shapes"]) == 2 and att["shapes"][1]["label"].startswith("custom")
bench = json.load(open(f"{d}/bench-tiny.json"))
assert bench["median"]["tokens_per_s"] > 0 and bench["kernels"], "no profile"
torch = json.load(open(f"{d}/torch-tiny.json"))
assert "skipped" in torch or torch["tokens_per_s"] > 0, torch
rows = [l.split("\t") for l in open(f"{d}/sections.tsv").read().splitlines()]
assert [r[1] for r in rows] == ["ok"] * 12, rows
EOF

# The CUDA library folders: the one with the newest cuBLASLt first, then
# the newest cuDNN's, by the release each library reports (two fake
# libraries of each, built here).
if command -v cc >/dev/null; then
  for r in 13.0.2:130002:91300 13.1.0:130100:92000; do
    IFS=: read -r name lt dnn <<<"$r"
    mkdir -p "$work/libs/$name"
    echo "unsigned long cublasLtGetVersion(void) { return $lt; }" >"$work/lt.c"
    echo "unsigned long cudnnGetVersion(void) { return $dnn; }" >"$work/dnn.c"
    cc -shared -fPIC -o "$work/libs/$name/libcublasLt.so.13" "$work/lt.c"
    cc -shared -fPIC -o "$work/libs/$name/libcudnn.so.9" "$work/dnn.c"
  done
  mkdir -p "$work/libs/dnn-only"
  cp "$work/libs/13.0.2/libcudnn.so.9" "$work/libs/dnn-only/"
  printf 'libcudnn.so.9 9.19.0\nlibcublasLt.so.13 13.1.0.3\n' >"$work/libs/list"
  order="$(python3 "$root/scripts/gpu_check_cuda_libs.py" "$work/libs/list" \
    "$work/libs/dnn-only" "$work/libs/13.0.2" "$work/libs/13.1.0")"
  [ "$(head -n 1 <<<"$order")" = "$work/libs/13.1.0:$work/libs/dnn-only:$work/libs/13.0.2" ] ||
    fail "CUDA library folders in the wrong order: $order"
  grep -qxF "libcublasLt.so.13 13.0.2 $work/libs/13.0.2 (older than the build's 13.1.0.3)" \
    <<<"$order" || fail "the older cuBLASLt is not named as older: $order"
  grep -qxF "libcublasLt.so.13 13.1.0 $work/libs/13.1.0" <<<"$order" ||
    fail "no release of the newer cuBLASLt: $order"
fi

# 2. A failing and a hanging section: fake programs beside the real ones.
mkdir "$work/fake"
ln -s "$build"/bin/* "$work/fake/"
rm "$work/fake/trellis-bench" "$work/fake/trellis-attention-bench"
printf '#!/bin/sh\necho "fake bench fails"\nexit 3\n' >"$work/fake/trellis-bench"
printf '#!/bin/sh\necho $$ >"%s"\nexec sleep 600\n' "$work/sleeper.pid" \
  >"$work/fake/trellis-attention-bench"
chmod +x "$work/fake/trellis-bench" "$work/fake/trellis-attention-bench"
start=$(date +%s)
rc=0
OUT= "$root/scripts/gpu-check.sh" --dry-run --bin "$work/fake" \
  --only bench,attention,torch-sdpa,goals --budget 45 \
  --log-dir "$work/logs2" --results "$work/results2" >"$work/stdout2" 2>&1 || rc=$?
took=$(($(date +%s) - start))
cat "$work/stdout2"
[ "$rc" -ne 0 ] || fail "the check passed with failing sections"
grep -q '^---- bench:tiny: FAILED (exit 3)' "$work/stdout2" || fail "bench:tiny not failed"
grep -q '^---- attention: timed out after [0-9]* s' "$work/stdout2" || fail "no time-out"
grep -q '^---- torch-sdpa: skipped: the 45 s budget is spent' "$work/stdout2" ||
  fail "torch-sdpa ran past the budget"
grep -q '^---- goals: ok' "$work/stdout2" || fail "goals did not run after the failures"
grep -q '^gpu-check: FAILED sections: bench:tiny attention torch-sdpa$' \
  "$work/stdout2" || fail "the failed sections are not named"
! grep -q '^==== \(system\|tests\|memcheck\|torch:tiny\)' "$work/stdout2" || fail "--only ignored"
[ "$took" -lt 75 ] || fail "the time-out took $took s (budget 45 s)"
# Gone, or a zombie whose new parent has not reaped it yet.
sleep 1
state="$(ps -o stat= -p "$(cat "$work/sleeper.pid")" || true)"
if [ -n "$state" ] && [[ "$state" != Z* ]]; then
  kill "$(cat "$work/sleeper.pid")"
  fail "the timed-out section's process still runs ($state)"
fi

# 3. The real check on this machine, which has no GPU: it stops after the
# system section, fails and says why, in seconds.
start=$(date +%s)
rc=0
OUT= "$root/scripts/gpu-check.sh" --bin "$build/bin" --log-dir "$work/logs3" \
  --results "$work/results3" >"$work/stdout3" 2>&1 || rc=$?
took=$(($(date +%s) - start))
cat "$work/stdout3"
if [ -e /dev/nvidiactl ] || command -v nvidia-smi >/dev/null; then
  echo "a GPU may be here: not checking the no-GPU stop"
else
  [ "$rc" -ne 0 ] || fail "the check passed without a GPU"
  grep -q '^---- system: FAILED' "$work/stdout3" || fail "system did not fail"
  grep -q 'TRELLIS_REQUIRE_GPU=1' "$work/stdout3" ||
    fail "the programs did not run with TRELLIS_REQUIRE_GPU=1"
  grep -q '^gpu-check: stopped: the system section failed' "$work/stdout3" ||
    fail "no stop after the system section"
  ! grep -q '^==== tests' "$work/stdout3" || fail "sections ran without a GPU"
  [ "$took" -lt 60 ] || fail "the no-GPU stop took $took s"
fi
echo "gpu_check_test: passed"
