# Warning flags for autocastgen's own targets (not for generated or third-party code).
# AUTOCASTGEN_WERROR turns them into errors: scripts/test builds the default preset so, so that a
# new warning fails the test command (and CI) instead of scrolling past. Off by default: another
# compiler may warn where GCC 12 does not, and a user's build should not fail for that.
option(AUTOCASTGEN_WERROR "Treat warnings in autocastgen's own code as errors" OFF)
function(autocastgen_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter
    $<$<BOOL:${AUTOCASTGEN_WERROR}>:-Werror>)
endfunction()
