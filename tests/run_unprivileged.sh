#!/usr/bin/env bash
# CI's second pass of the sandbox tests, as a non-root user: the sandbox then has no `nobody` to drop
# to and no cgroup to make, so it must isolate by user namespaces (or refuse), and the tests check
# what that mode promises. As root: create the user `celtk-ci` if missing and run the tests as it.
# Not root, or no way to make a user: say so and skip (exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
USER_NAME=${CELTK_CI_USER:-celtk-ci}
skip() { echo "run_unprivileged: $1 Skipped."; exit 0; }
[ "$(id -u)" = 0 ] || skip "already running as uid $(id -u), so make test ran the sandbox tests unprivileged."
if ! id -u "$USER_NAME" >/dev/null 2>&1; then
  command -v useradd >/dev/null || skip "no useradd to create the user $USER_NAME."
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$USER_NAME"
fi
repo=$PWD
base=$("$PY" -c 'import os, sys; print(os.path.realpath(sys.base_prefix))')
blocked() { setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --clear-groups test ! -r "$1" -o ! -x "$1"; }
run_tests() {
  cd "$repo"
  exec setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --clear-groups env HOME=/nonexistent PATH="$PATH" \
    "$PY" -m pytest -q -p no:cacheprovider --noconftest tests/unit/test_sandbox.py "$@"
}
if ! blocked "$repo" && ! blocked "$base"; then
  run_tests "$@"
fi
# The interpreter or the clone sits under a directory the user cannot enter (pyenv in /root): in a
# private mount namespace, cover the highest such directory with an empty tmpfs and bind the two back.
unshare --mount true 2>/dev/null || skip "$USER_NAME cannot reach $repo or $base, and no mount namespace to expose them."
export -f blocked run_tests
export USER_NAME repo base PY
exec unshare --mount bash -c '
set -euo pipefail
for dir in "$repo" "$base"; do
  blocked "$dir" || continue
  top=$dir parent=$(dirname "$dir")
  while [ "$parent" != / ]; do
    if blocked "$parent"; then top=$parent; fi
    parent=$(dirname "$parent")
  done
  holders=()
  for keep in "$repo" "$base"; do  # a process standing in each directory keeps it reachable
    case "$keep/" in "$top"/*) (cd "$keep" && exec sleep 600) & holders+=("$!:$keep");; esac
  done
  for h in "${holders[@]}"; do
    until [ "$(readlink "/proc/${h%%:*}/cwd")" = "${h#*:}" ]; do sleep 0.05; done
  done
  mount -t tmpfs -o mode=755 tmpfs "$top"
  for h in "${holders[@]}"; do
    mkdir -p "${h#*:}"; mount -c --rbind "/proc/${h%%:*}/cwd" "${h#*:}"; kill "${h%%:*}"
  done
done
run_tests "$@"
' run-unprivileged "$@"
