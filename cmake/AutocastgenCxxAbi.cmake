# Builds against a PyTorch of the pre-C++11 std::string ABI (PyPI's wheels before 2.7): the whole
# project then uses that ABI, with yaml-cpp and GoogleTest from old-ABI builds of them.
#   autocastgen_select_cxx_abi()      after autocastgen_find_torch(), before finding the C++ deps
#   autocastgen_check_old_abi_deps()  after finding them: they came from the old-ABI prefix
# Sets AUTOCASTGEN_OLD_CXX_ABI (ON/OFF) in the caller's scope.
#
# Note [one string ABI per program]
# std::string and std::list differ between the two ABIs, so every library that passes them across
# its interface must be built with the ABI of libtorch. Of autocastgen's dependencies, yaml-cpp and
# GoogleTest are compiled libraries, and Debian's use the C++11 ABI; scripts/torch-releases
# old-abi-deps builds both from Debian's sources with -D_GLIBCXX_USE_CXX11_ABI=0 into the release
# cache, once. fmt is then used header-only (FMT_HEADER_ONLY); nlohmann-json, CLI11 and kainjow
# mustache are header-only anyway. The Clang importer (LLVM and libclang-cpp are C++11-ABI
# libraries) and the benchmarks (Google Benchmark, likewise) are left out of such a build.

set(AUTOCASTGEN_OLD_ABI_DEPS "" CACHE PATH
  "yaml-cpp and GoogleTest built with -D_GLIBCXX_USE_CXX11_ABI=0, for a PyTorch of that ABI (default: scripts/torch-releases old-abi-deps --path)")

macro(autocastgen_select_cxx_abi)
  set(AUTOCASTGEN_OLD_CXX_ABI OFF)
  if(AUTOCASTGEN_WITH_TORCH AND "${AUTOCASTGEN_TORCH_CXX11_ABI}" STREQUAL "0")
    set(AUTOCASTGEN_OLD_CXX_ABI ON)
    _autocastgen_old_abi_prefix(_acg_deps)
    if(NOT EXISTS "${_acg_deps}/deps.txt" OR NOT EXISTS "${_acg_deps}/lib/cmake/yaml-cpp/yaml-cpp-config.cmake"
       OR NOT EXISTS "${_acg_deps}/lib/cmake/GTest/GTestConfig.cmake")
      message(FATAL_ERROR
        "autocastgen: the pre-C++11 string ABI of PyTorch ${AUTOCASTGEN_TORCH_VERSION} "
        "(torch.compiled_with_cxx11_abi() is False, as for PyPI's wheels before 2.7) needs old-ABI builds "
        "of yaml-cpp and GoogleTest: whatever links torch must use its ABI, and Debian's builds of them use "
        "the C++11 one. They are not in ${_acg_deps} (torch at ${AUTOCASTGEN_TORCH_DIR}). Make them once with:\n"
        "  scripts/torch-releases old-abi-deps\n"
        "(a few minutes; see docs/releases.md), or point -DAUTOCASTGEN_OLD_ABI_DEPS at such a build. "
        "The generator alone builds without them: -DAUTOCASTGEN_WITH_TORCH=OFF.")
    endif()
    set(AUTOCASTGEN_OLD_ABI_DEPS_FOUND "${_acg_deps}")
    add_compile_definitions(_GLIBCXX_USE_CXX11_ABI=0)
    set(yaml-cpp_DIR "${_acg_deps}/lib/cmake/yaml-cpp")
    set(GTest_DIR "${_acg_deps}/lib/cmake/GTest")
    # fmt header-only, under the target name the code links (fmt::fmt).
    find_path(AUTOCASTGEN_FMT_INCLUDE_DIR fmt/format-inl.h)
    if(NOT AUTOCASTGEN_FMT_INCLUDE_DIR)
      message(FATAL_ERROR "autocastgen: fmt's headers (fmt/format-inl.h, Debian package libfmt-dev) were not found")
    endif()
    add_library(fmt::fmt INTERFACE IMPORTED)
    target_include_directories(fmt::fmt INTERFACE "${AUTOCASTGEN_FMT_INCLUDE_DIR}")
    target_compile_definitions(fmt::fmt INTERFACE FMT_HEADER_ONLY=1)
    # Left out: they link C++11-ABI libraries (LLVM/Clang, Google Benchmark).
    if(AUTOCASTGEN_IMPORTER OR AUTOCASTGEN_BUILD_BENCH)
      message(STATUS "autocastgen: the C++ importer and the benchmarks are left out of an old-ABI build")
    endif()
    set(AUTOCASTGEN_IMPORTER OFF)
    set(AUTOCASTGEN_BUILD_BENCH OFF)
    message(STATUS "autocastgen: pre-C++11 string ABI: everything is built with -D_GLIBCXX_USE_CXX11_ABI=0, "
                   "against yaml-cpp and GoogleTest from ${_acg_deps}, fmt header-only")
  endif()
endmacro()

function(_autocastgen_old_abi_prefix out)
  if(AUTOCASTGEN_OLD_ABI_DEPS)
    set(${out} "${AUTOCASTGEN_OLD_ABI_DEPS}" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/torch-releases old-abi-deps --path
    OUTPUT_VARIABLE prefix OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  set(${out} "${prefix}" PARENT_SCOPE)
endfunction()

# The old-ABI build must not have picked up Debian's (C++11-ABI) yaml-cpp or GoogleTest.
function(autocastgen_check_old_abi_deps)
  if(NOT AUTOCASTGEN_OLD_CXX_ABI)
    return()
  endif()
  foreach(target yaml-cpp GTest::gtest GTest::gmock)
    if(TARGET ${target})
      get_target_property(location ${target} LOCATION)
      string(FIND "${location}" "${AUTOCASTGEN_OLD_ABI_DEPS_FOUND}/" at)
      if(NOT at EQUAL 0)
        message(FATAL_ERROR "autocastgen: the old-ABI build found ${target} at ${location}, not in "
                            "${AUTOCASTGEN_OLD_ABI_DEPS_FOUND}")
      endif()
    endif()
  endforeach()
endfunction()
