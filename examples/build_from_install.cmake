# Script mode: builds an out-of-tree example exactly as a user of the package would: installs
# autocastgen into PREFIX (cmake --install), configures SOURCE_DIR against it with
# find_package(autocastgen) into BINARY_DIR, builds it and touches STAMP.
#   cmake -DAUTOCASTGEN_BUILD_DIR=... -DPREFIX=... -DSOURCE_DIR=... -DBINARY_DIR=... -DSTAMP=...
#         [-DPython3_EXECUTABLE=...] [-DLAUNCHER=ccache] -P build_from_install.cmake
foreach(var AUTOCASTGEN_BUILD_DIR PREFIX SOURCE_DIR BINARY_DIR STAMP)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "build_from_install.cmake: -D${var}= is required")
  endif()
endforeach()
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}): ${ARGN}\n${out}")
  endif()
endfunction()

run("installing autocastgen" ${CMAKE_COMMAND} --install "${AUTOCASTGEN_BUILD_DIR}" --prefix "${PREFIX}")
if(NOT EXISTS "${BINARY_DIR}/CMakeCache.txt")
  set(configure ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_PREFIX_PATH=${PREFIX}")
  if(Python3_EXECUTABLE)
    list(APPEND configure "-DPython3_EXECUTABLE=${Python3_EXECUTABLE}")
  endif()
  if(LAUNCHER)
    list(APPEND configure "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
  endif()
  run("configuring ${SOURCE_DIR} against the installed package" ${configure})
endif()
# The example's own build reconfigures itself when its CMakeLists change.
run("building ${SOURCE_DIR}" ${CMAKE_COMMAND} --build "${BINARY_DIR}")
file(TOUCH "${STAMP}")
