#!/usr/bin/env bash
# Runs both client suites against a built `journal` binary: JOURNAL_BIN, else
# target/debug/journal under the repository root, then Schemathesis against a server of that
# binary (clients/schemathesis.sh; SCHEMATHESIS=0 leaves it out). Exits non-zero if any
# fails.
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

# Serves a journal with the demo's workload and a real Claude Code session imported, and runs
# clients/schemathesis.sh against it with an admin token and ids that are recorded; stops the
# server with SIGTERM, which must exit 0.
schemathesis_suite() {
  local tmp dir logs token session ids url pid rc code
  tmp="$(mktemp -d)"
  dir="$tmp/journal"
  logs="$root/testdata/agent-logs/claude-code"
  "$JOURNAL_BIN" demo --out "$dir" >/dev/null
  session="$("$JOURNAL_BIN" --dir "$dir" import claude-code "$logs/cctrace_phase0-investigation_main.jsonl" \
    --blobs "$logs/cctrace_file-history" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["sessions"][0])')"
  # A demo session, task and run: the first task event that names all three.
  ids="$("$JOURNAL_BIN" --dir "$dir" read --type task. --limit 1000 | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e.get("sessionId") and e.get("taskId") and e.get("runId"):
        print(e["sessionId"], e["taskId"], e["runId"])
        break
')"
  token="$("$JOURNAL_BIN" --dir "$dir" token create --scope admin 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
  "$JOURNAL_BIN" --dir "$dir" serve --listen 127.0.0.1:0 >"$tmp/serve.out" 2>"$tmp/serve.err" &
  pid=$!
  for _ in $(seq 100); do
    [[ -s "$tmp/serve.out" ]] && break
    sleep 0.1
  done
  url="http://$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["listening"])' "$tmp/serve.out")"
  rc=0
  # shellcheck disable=SC2086 # the ids are words
  bash "$root/clients/schemathesis.sh" "$url" "$token" "$session" $ids || rc=$?
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  if [[ "$code" -ne 0 ]]; then
    echo "run-tests.sh: the server exited $code: $(cat "$tmp/serve.err")" >&2
    rc=1
  fi
  rm -rf "$tmp"
  return "$rc"
}

status=0
echo "== Python client (python3 -m unittest) =="
python3 -m unittest discover -s clients/python/tests -v || status=1
echo
echo "== TypeScript client (node --test) =="
node --test clients/typescript/test/ || status=1
if [[ "${SCHEMATHESIS:-1}" != 0 ]]; then
  echo
  echo "== Schemathesis against journal serve (clients/schemathesis.sh) =="
  schemathesis_suite || status=1
fi
exit "$status"
