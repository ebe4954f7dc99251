# Sourced by scripts/run and scripts/test: how both configure a build, so that the README's two
# commands share one build tree (build/) and one compiler cache, whichever runs first.
#   configure_preset PRESET [CMAKE_ARGS...]   cmake --preset PRESET with the compiler cache and,
#                                             for default, -Werror and the models venv's python
# Compiles go through ccache when it is installed (scripts/setup installs it).

# Paths below the clone are hashed relative to the build directory, so builds one level below the
# clone (build/, build-pip/ of the pip test) share compiled objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
# Files compiled with a precompiled header (Note [precompiled torch headers]) are cached only so.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# Debug builds (-g) are hashed with their build directory by default, so the sanitizer presets
# (asan, asan-torch: the same flags for the policy core, the generator and the kernels) would
# compile those files twice; without it, the debug info names the first build's directory.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

configure_preset() {
  local preset=$1; shift
  # The default build fails on a warning in our code (cmake/AutocastgenWarnings.cmake) and builds
  # with the python of the venv that adds transformers to the machine's packages
  # (scripts/models-venv), so the tests on real models run; other presets skip those tests.
  local choices=(-DAUTOCASTGEN_WERROR=OFF)
  if [[ $preset == default ]]; then
    choices=(-DAUTOCASTGEN_WERROR=ON -DAUTOCASTGEN_PYTHON="$("$root/scripts/models-venv")")
  fi
  cmake --preset "$preset" "${launcher[@]}" "${choices[@]}" "$@" >/dev/null
}
