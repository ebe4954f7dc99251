# Compiles go through ccache when it is installed (AUTOCASTGEN_CCACHE=OFF, or a launcher of one's
# own with -DCMAKE_CXX_COMPILER_LAUNCHER=..., turns it off), with the settings that let the builds of
# one clone share objects, whoever starts them (scripts/test, scripts/run, scripts/wheel, pip):
# - paths below the clone are hashed relative to the build directory (CCACHE_BASEDIR), so builds
#   one level below the clone (build/, build-wheel-base/, build-pip/, ...) share compiled objects;
# - files compiled with a precompiled header (Note [precompiled torch headers]) are cached only with
#   the sloppiness below;
# - debug builds (-g) are not hashed with their build directory (CCACHE_NOHASHDIR), so the sanitizer
#   presets (asan, asan-torch: the same flags for the policy core, the generator and the kernels)
#   compile those files once; the debug info then names the first build's directory.
# The settings travel in the launcher itself (cmake -E env ... ccache), not in the caller's
# environment: a build started by hand shares the cache as the scripts' builds do.
option(AUTOCASTGEN_CCACHE "Compile through ccache when it is installed" ON)
set(AUTOCASTGEN_CCACHE_PROGRAM "")
if(AUTOCASTGEN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(AUTOCASTGEN_CCACHE_FOUND ccache)
  if(AUTOCASTGEN_CCACHE_FOUND)
    set(AUTOCASTGEN_CCACHE_PROGRAM ${AUTOCASTGEN_CCACHE_FOUND})
    set(launcher ${CMAKE_COMMAND} -E env
      CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_NOHASHDIR=true
      ${AUTOCASTGEN_CCACHE_FOUND})
    foreach(lang C CXX CUDA)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${launcher})
    endforeach()
  endif()
endif()
