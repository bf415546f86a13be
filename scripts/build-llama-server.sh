#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU) for the integration tests, once per version.
#
# The source is the llama.cpp tree vendored in llama-cpp-python's PyPI sdist (PyPI is the one
# place this project may fetch from). The build lands in a cache directory keyed by that
# version and is skipped when a working binary is already there (~10 min on 2 cores otherwise).
# Progress goes to stderr; the binary's path is the one line printed on stdout.
#
#   LLAMA_CPP_PYTHON_VERSION  sdist version to build from (default 0.3.36)
#   KL_BITEXACT_CACHE         cache root (default ${XDG_CACHE_HOME:-~/.cache}/kl-bitexact)
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${KL_BITEXACT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kl-bitexact}"
build_root="$cache/build"
source_dir="$build_root/llama_cpp_python-$version"
tree="$source_dir/vendor/llama.cpp"
binary="$tree/build/bin/llama-server"

say() { echo "build-llama-server: $*" >&2; }

works() { [[ -x "$binary" ]] && "$binary" --version >/dev/null 2>&1; }

if works; then
    echo "$binary"
    exit 0
fi

mkdir -p "$build_root"
# One build at a time: parallel test sessions wait for the first one's binary.
exec 9>"$build_root/.lock-$version"
flock 9
if works; then
    echo "$binary"
    exit 0
fi

if [[ ! -d "$tree" ]]; then
    say "downloading the llama-cpp-python $version sdist"
    python3 -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$version" -d "$build_root" >&2
    tar -xzf "$build_root/llama_cpp_python-$version.tar.gz" -C "$build_root"
fi

if ! command -v cmake >/dev/null; then
    say "cmake not found; installing it from PyPI"
    python3 -m pip install --quiet cmake >&2
fi

say "configuring $tree (log: $build_root/cmake-$version.log)"
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    >"$build_root/cmake-$version.log" 2>&1 || {
    tail -20 "$build_root/cmake-$version.log" >&2
    exit 1
}

say "compiling llama-server on $(nproc) cores (about 10 minutes on 2)"
# Print the first line of each new "[ NN%]" step as it comes, so a CI log shows the build moving.
cmake --build "$tree/build" --target llama-server -j "$(nproc)" 2>&1 |
    tee "$build_root/build-$version.log" |
    awk '/^\[ *[0-9]+%\]/ { step = $2; if (step != last) { print; fflush(); last = step } }' >&2 || true
if ! works; then
    say "build failed; the last lines of $build_root/build-$version.log:"
    tail -30 "$build_root/build-$version.log" >&2
    exit 1
fi
say "built $binary"
echo "$binary"
