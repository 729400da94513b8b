#!/usr/bin/env bash
# THE project test command (README and .ci/run call it; use nothing else).
#
#   scripts/test.sh [CARGO TEST ARGS...]     e.g. scripts/test.sh -- --nocapture
#
# With a throwaway PostgreSQL + Redis (scripts/with-services.sh), runs in order and
# stops at the first failure: rustfmt check, clippy (warnings are errors), and
# `cargo test --workspace` with this script's arguments passed through.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

exec scripts/with-services.sh bash -c '
  set -euo pipefail
  # Each step says how long it took, so a slow run shows where its time went.
  step() {
    local start=$SECONDS
    printf "\n==> %s\n" "$*" >&2
    "$@"
    printf "<== %s: %d s\n" "$1 $2" $((SECONDS - start)) >&2
  }
  step cargo fmt --all -- --check
  step cargo clippy --workspace --all-targets -- -D warnings
  step cargo test --workspace "$@" 2>&1 | tee target/test-output.log
  # One closing line for the whole run, summed over every test binary.
  awk "/^test result:/ { for (i = 1; i <= NF; i++) { if (\$(i+1) ~ /^passed/) p += \$i; if (\$(i+1) ~ /^failed/) f += \$i } }
       END { printf \"\ntests: %d passed, %d failed\n\", p, f }" target/test-output.log
' scripts/test.sh "$@"
