# Script mode: cmake --install, then build a copy of examples/consumer with find_package and run it;
# then check add_autocast_ops()'s rebuild rules on that copy:
#   - a second build does nothing;
#   - touching the base policy (in the extends chain) regenerates; the generated file does not
#     change (its header hashes the inputs' contents), so nothing recompiles;
#   - a real edit of the base policy regenerates and recompiles.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: command failed (${rc}): ${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
function(expect_in text what)
  string(FIND "${last_output}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "consumer test: expected '${text}' (${what}) in:\n${last_output}")
  endif()
endfunction()
function(expect_not_in text what)
  string(FIND "${last_output}" "${text}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "consumer test: did not expect '${text}' (${what}) in:\n${last_output}")
  endif()
endfunction()

set(src "${WORK_DIR}/src")
file(COPY "${SOURCE_DIR}/" DESTINATION "${src}")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/install")
run(${CMAKE_COMMAND} -S "${src}" -B "${WORK_DIR}/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/install" "-DPython3_EXECUTABLE=${Python3_EXECUTABLE}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer_demo")
message(STATUS "${last_output}")
expect_in("consumer: ok" "the demo's verdict")

run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
expect_in("no work to do" "an unchanged tree rebuilds nothing")

# A newer timestamp on the base policy (as after a checkout): regenerated, not recompiled.
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
file(TOUCH "${src}/mybackend_base.yaml")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
expect_in("autocastgen: generating autocast wrappers" "the extends chain is a dependency")
expect_not_in("autocast_mybackend_policy.cpp.o" "an unchanged generated file is not recompiled")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
expect_in("no work to do" "after regenerating, the next build does nothing")

# A real edit of the base policy: the generated file changes and is recompiled.
file(APPEND "${src}/mybackend_base.yaml" "# reviewed\n")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
expect_in("autocast_mybackend_policy.cpp.o" "a changed generated file is recompiled")
