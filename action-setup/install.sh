#!/usr/bin/env bash
# Build the composite action's own virtual environment: exactly the pinned requirements,
# then kl-bitexact from this checkout of the action. Prints `venv=PATH` to $GITHUB_OUTPUT.
#
# The environment lives in $RUNNER_TEMP (per job), keyed by the interpreter, the pins and
# the package's source, so a second use of the action in a job reuses it. On a dedicated
# runner that never runs untrusted code, KL_BITEXACT_VENV_CACHE=DIR keeps environments
# across jobs instead (built under a lock; the tests use it to avoid one install per job).
set -euo pipefail

python="${INPUT_PYTHON:-python3}"
action_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$action_dir/action-setup/requirements.txt"

fail() {
    echo "::error title=kl-bitexact::$1"
    exit 2
}

command -v "$python" >/dev/null ||
    fail "python: interpreter '$python' not found on this runner; set the action's python input to a Python 3.10+ it has"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    fail "python: '$python' is $("$python" --version 2>&1); kl-bitexact needs Python 3.10 or newer"

key="$(
    {
        "$python" -c 'import sys; print(sys.executable, sys.version)'
        cat "$requirements"
        # The package's source (not what building it leaves behind: egg-info, bytecode).
        cd "$action_dir" && find pyproject.toml src -type f ! -path '*.egg-info/*' ! -name '*.pyc' -print0 |
            sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
)"

if [[ -n "${KL_BITEXACT_VENV_CACHE:-}" ]]; then
    mkdir -p "$KL_BITEXACT_VENV_CACHE"
    venv="$KL_BITEXACT_VENV_CACHE/venv-$key"
    exec 9>"$venv.lock"
    flock 9
else
    venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/kl-bitexact-venv-$key"
fi

if [[ ! -f "$venv/.complete" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    pip=("$venv/bin/python" -m pip --disable-pip-version-check)
    # --no-compile: modules compile on first import instead; halves the install time.
    "${pip[@]}" install --quiet --no-deps --no-compile --require-virtualenv -r "$requirements"
    "${pip[@]}" install --quiet --no-deps --no-compile --no-build-isolation "$action_dir"
    # Every dependency pinned? (action-setup/requirements.txt lags pyproject.toml otherwise.)
    "${pip[@]}" check >&2 ||
        fail "action-setup/requirements.txt misses a dependency of kl-bitexact (above); run action-setup/update_requirements.py"
    touch "$venv/.complete"
fi
echo "venv=$venv" >>"$GITHUB_OUTPUT"
echo "kl-bitexact $("$venv/bin/kl-bitexact" --version | cut -d' ' -f2) in $venv"
