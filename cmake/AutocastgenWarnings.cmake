# Warning flags for autocastgen's own targets (not for generated or third-party code).
function(autocastgen_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
endfunction()
