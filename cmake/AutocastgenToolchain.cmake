# Refuses a C++ toolchain that links libstdc++ statically into what it builds (seen: a GCC wrapper
# selected through CXX that adds -static-libstdc++). Our libraries are loaded into a process that
# already has libtorch's shared libstdc++; a second, static copy has its own std::ostream and
# locale state, and the first exception message built through it (c10::str inside a TORCH_CHECK)
# crashes. Checked by linking a small shared library and reading what it needs.
function(autocastgen_check_shared_libstdcxx)
  set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/autocastgen_libstdcxx_check")
  file(WRITE "${dir}/probe.cpp" "#include <sstream>\nstd::string probe(int v) { std::ostringstream s; s << v; return s.str(); }\n")
  file(WRITE "${dir}/CMakeLists.txt"
    "cmake_minimum_required(VERSION 3.25)\nproject(probe CXX)\nadd_library(probe SHARED probe.cpp)\n")
  try_compile(built "${dir}/build" "${dir}" probe probe
    CMAKE_FLAGS "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}" "-DCMAKE_SHARED_LINKER_FLAGS=${CMAKE_SHARED_LINKER_FLAGS}"
    OUTPUT_VARIABLE log)
  file(GLOB_RECURSE probe_lib "${dir}/build/*libprobe.so")
  if(NOT built OR NOT probe_lib)
    message(WARNING "autocastgen: could not build the libstdc++ probe; skipping the check:\n${log}")
    return()
  endif()
  list(GET probe_lib 0 probe_lib)
  execute_process(COMMAND ${CMAKE_OBJDUMP} -p "${probe_lib}" OUTPUT_VARIABLE needed ERROR_QUIET)
  if(NOT needed MATCHES "NEEDED +libstdc\\+\\+\\.so")
    message(FATAL_ERROR
      "autocastgen: the C++ compiler ${CMAKE_CXX_COMPILER} links libstdc++ statically into shared "
      "libraries (a test library built with it does not need libstdc++.so). Libraries loaded next to "
      "libtorch must share its libstdc++: with a static copy, the first error message built inside "
      "a torch op crashes the process. Configure with the system compiler instead, e.g. "
      "CC=/usr/bin/gcc CXX=/usr/bin/g++ (or -DCMAKE_CXX_COMPILER=/usr/bin/g++ in a fresh build "
      "directory), or drop -static-libstdc++ from the flags.")
  endif()
endfunction()
