# Sourced by scripts/run and scripts/test: how both configure a build, so that the README's two
# commands share one build tree (build/) and one compiler cache, whichever runs first.
#   configure_preset PRESET [CMAKE_ARGS...]   cmake --preset PRESET with the compiler cache and,
#                                             for default, -Werror and the models venv's python
# Compiles go through ccache when it is installed, with the settings that let these builds share
# objects (cmake/AutocastgenCcache.cmake).

configure_preset() {
  local preset=$1; shift
  # The default build fails on a warning in our code (cmake/AutocastgenWarnings.cmake) and builds
  # with the python of the venv that adds transformers to the machine's packages
  # (scripts/models-venv), so the tests on real models run; other presets skip those tests.
  local choices=(-DAUTOCASTGEN_WERROR=OFF)
  if [[ $preset == default ]]; then
    choices=(-DAUTOCASTGEN_WERROR=ON -DAUTOCASTGEN_PYTHON="$("$root/scripts/models-venv")")
  fi
  cmake --preset "$preset" "${choices[@]}" "$@" >/dev/null
}
