#!/usr/bin/env bash
# Build the composite action's own virtual environment: exactly the pinned requirements,
# then kl-bitexact from this checkout of the action. Prints `venv=PATH` to $GITHUB_OUTPUT.
# A second use of the action in the same job (same interpreter, same action checkout)
# reuses the environment.
set -euo pipefail

python="${INPUT_PYTHON:-python3}"
action_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$action_dir/action/requirements.txt"

fail() {
    echo "::error title=kl-bitexact::$1"
    exit 2
}

command -v "$python" >/dev/null ||
    fail "python: interpreter '$python' not found on this runner; set the action's python input to a Python 3.10+ it has"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    fail "python: '$python' is $("$python" --version 2>&1); kl-bitexact needs Python 3.10 or newer"

key="$({ "$python" -c 'import sys; print(sys.executable, sys.version)'; echo "$action_dir"; cat "$requirements"; } | sha256sum | cut -c1-16)"
venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kl-bitexact-venv-$key"

if [[ ! -f "$venv/.complete" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
    # --no-compile: modules compile on first import instead; halves the install time.
    "${pip[@]}" install --no-deps --no-compile --require-virtualenv -r "$requirements"
    "${pip[@]}" install --no-deps --no-compile --no-build-isolation "$action_dir"
    "${pip[@]}" check
    touch "$venv/.complete"
fi
echo "venv=$venv" >>"$GITHUB_OUTPUT"
echo "kl-bitexact $("$venv/bin/kl-bitexact" --version | cut -d' ' -f2) in $venv"
