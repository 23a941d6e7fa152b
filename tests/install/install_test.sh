#!/usr/bin/env bash
# The installed package, used the way a C or C++ runtime uses it (ctest runs this as `install.examples`):
#   1. cmake --install of the build tree into a fresh prefix;
#   2. every installed header compiles with nothing but <prefix>/include (C++17; ctxcache.h also as C99), and
#      each part of the C header (ctxcache/c/<part>.h) compiles alone, as C99 -pedantic and as C++17;
#   3. examples/c and examples/cpp configure with only find_package(ctxcache CONFIG REQUIRED) and
#      CMAKE_PREFIX_PATH=<prefix>, build, and run: the C manager example (main.c), the C runtime example
#      (runtime_example.c, the lifecycle of docs/RUNTIME.md) and the C++ example (each asserts its reuse numbers
#      and exits non-zero otherwise);
#   4. the C examples again, compiled with nothing but `pkg-config --cflags --libs ctxcache`.
# A broken install rule, config file, exported target or leaked private include fails here.
#
#   tests/install/install_test.sh <build-dir> <source-dir>
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work="$build/install-test"
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work"

step() { echo "== install test: $*"; }

step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

step "installed headers compile with only <prefix>/include"
cxx=${CXX:-c++}
cc=${CC:-cc}
{
    echo '#include <ctxcache.h>'
    (cd "$prefix/include" && find ctxcache -name '*.h' | sort | sed 's/.*/#include <&>/')
} >"$work/all_headers.cpp"
"$cxx" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$prefix/include" "$work/all_headers.cpp"
echo '#include <ctxcache.h>' >"$work/c_header.c"
"$cc" -std=c99 -pedantic -fsyntax-only -Wall -Wextra -Werror -I"$prefix/include" "$work/c_header.c"

step "each part of the C header compiles alone (C99 -pedantic, C++17)"
parts=("$prefix"/include/ctxcache/c/*.h)
[ -f "${parts[0]}" ] || { echo "no C header parts installed under $prefix/include/ctxcache/c" >&2; exit 1; }
for part in "${parts[@]}"; do
    echo "#include <ctxcache/c/$(basename "$part")>" >"$work/c_part.c"
    "$cc" -std=c99 -pedantic -fsyntax-only -Wall -Wextra -Werror -I"$prefix/include" "$work/c_part.c"
    "$cxx" -x c++ -std=c++17 -pedantic -fsyntax-only -Wall -Wextra -Werror -I"$prefix/include" "$work/c_part.c"
done
echo "${#parts[@]} parts"

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
for lang in c cpp; do
    step "examples/$lang with find_package(ctxcache CONFIG REQUIRED)"
    cmake -S "$src/examples/$lang" -B "$work/$lang" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/$lang-configure.log" \
        || { cat "$work/$lang-configure.log"; exit 1; }
    cmake --build "$work/$lang"
    if [ "$lang" = c ]; then
        "$work/c/ctxcache_example_c"
        "$work/c/ctxcache_runtime_example_c"
    else
        "$work/cpp/ctxcache_example_cpp"
    fi
done

step "examples/c with pkg-config"
export PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name ctxcache.pc -print -quit)")"
flags=$(pkg-config --cflags --libs ctxcache)
for example in main runtime_example; do
    # Nothing but the flags: their rpath lets the program find the library in a private prefix.
    # shellcheck disable=SC2086  # word splitting of the flags is the point
    "$cc" -std=c99 -Wall -Wextra -Werror "$src/examples/c/$example.c" -o "$work/c_pkgconfig_$example" $flags
    "$work/c_pkgconfig_$example"
done
step "ok"
