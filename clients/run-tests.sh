#!/usr/bin/env bash
# Runs both client suites against a built `journal` binary: JOURNAL_BIN, else
# target/debug/journal under the repository root. Exits non-zero if either suite fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOURNAL_BIN="${JOURNAL_BIN:-$root/target/debug/journal}"
case "$JOURNAL_BIN" in
  /*) ;;
  *) JOURNAL_BIN="$PWD/$JOURNAL_BIN" ;;
esac
if [[ ! -x "$JOURNAL_BIN" ]]; then
  echo "run-tests.sh: no journal binary at $JOURNAL_BIN (build it, or set JOURNAL_BIN)" >&2
  exit 2
fi
export JOURNAL_BIN
cd "$root"

status=0
echo "== Python client (python3 -m unittest) =="
python3 -m unittest discover -s clients/python/tests -v || status=1
echo
echo "== TypeScript client (node --test) =="
node --test clients/typescript/test/ || status=1
exit "$status"
