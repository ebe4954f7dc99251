# Install rules and the CMake package: `cmake --install` then find_package(autocastgen CONFIG).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Note [the wheel's parts]
# scripts/wheel installs into one folder, the package's, one torch-free build
# (AUTOCASTGEN_WHEEL_PART=base: bin/, include/, share/, the CMake package) and one build per torch
# release (=runtime, against the release's headers, Note [building against a release's headers], or
# against the installed torch where it is that release, which lets ccache serve what build/ compiled):
# _runtime/torch-X.Y/ (the runtime, its CUDA part, the kernels, autocastgen._C, build_info.json)
# and lib/cmake/autocastgen/torch-X.Y/ (their targets, which the CMake package includes for the
# torch it finds). autocastgen/_core/runtime.py loads the folder of the imported torch's release.
set(AUTOCASTGEN_WHEEL_PART "" CACHE STRING
  "scripts/wheel: install the torch-free part (base) or one release's runtime (runtime); empty: everything")
set_property(CACHE AUTOCASTGEN_WHEEL_PART PROPERTY STRINGS "" base runtime)
set(AUTOCASTGEN_RUNTIMES_PER_RELEASE OFF)
if(AUTOCASTGEN_WHEEL_PART STREQUAL "runtime")
  if(NOT AUTOCASTGEN_WITH_TORCH)
    message(FATAL_ERROR "autocastgen: AUTOCASTGEN_WHEEL_PART=runtime is a release's runtime (AUTOCASTGEN_WITH_TORCH=ON)")
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" release_minor "${AUTOCASTGEN_TORCH_VERSION}")
  set(runtime_dir _runtime/torch-${release_minor})
  set(runtime_targets)
  foreach(lib autocastgen_runtime_torch autocastgen_runtime_torch_cuda autocastgen_kernels autocastgen_kernels_cuda)
    # The CUDA kernels only with the CUDA part: built by this toolkit, they belong to its CUDA major.
    if(TARGET ${lib} AND NOT (lib STREQUAL "autocastgen_kernels_cuda" AND NOT AUTOCASTGEN_SCALER_CUDA_OPS))
      list(APPEND runtime_targets ${lib})
      string(REPLACE "autocastgen_" "" export_name ${lib})
      # torch's libraries: already loaded by the torch that imports us, or beside it in site-packages.
      set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name} INSTALL_RPATH "$ORIGIN;$ORIGIN/../../../torch/lib")
    endif()
  endforeach()
  install(TARGETS ${runtime_targets} EXPORT autocastgenRuntimeTargets
    LIBRARY DESTINATION ${runtime_dir} ARCHIVE DESTINATION ${runtime_dir} INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT autocastgenRuntimeTargets NAMESPACE autocastgen::
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/autocastgen/torch-${release_minor})
  set(cuda_part false)
  set(oldest_cuda_arch null)  # the oldest GPU the CUDA part has code for (GradScaler: Note [PyTorch's kernels where ours cannot run])
  if(AUTOCASTGEN_SCALER_CUDA_OPS)
    set(cuda_part true)
    foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      string(REGEX MATCH "^[0-9]+" arch "${arch}")
      if(oldest_cuda_arch STREQUAL "null" OR arch LESS oldest_cuda_arch)
        set(oldest_cuda_arch ${arch})
      endif()
    endforeach()
  endif()
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/wheel_runtime/build_info.json CONTENT
"{\"torch\": \"${AUTOCASTGEN_TORCH_VERSION}\", \"cuda\": \"${AUTOCASTGEN_TORCH_CUDA_VERSION}\", \"cuda_part\": ${cuda_part}, \"oldest_cuda_arch\": ${oldest_cuda_arch}, \"cxx11_abi\": ${AUTOCASTGEN_TORCH_CXX11_ABI}}
")
  install(FILES ${PROJECT_BINARY_DIR}/wheel_runtime/build_info.json DESTINATION ${runtime_dir})
  return()
elseif(AUTOCASTGEN_WHEEL_PART STREQUAL "base")
  if(AUTOCASTGEN_WITH_TORCH)
    message(FATAL_ERROR "autocastgen: AUTOCASTGEN_WHEEL_PART=base is the torch-free part (AUTOCASTGEN_WITH_TORCH=OFF)")
  endif()
  set(AUTOCASTGEN_RUNTIMES_PER_RELEASE ON)
elseif(AUTOCASTGEN_WHEEL_PART)
  message(FATAL_ERROR "autocastgen: AUTOCASTGEN_WHEEL_PART is base, runtime or empty, not ${AUTOCASTGEN_WHEEL_PART}")
endif()

set(install_targets autocastgen)
set_target_properties(autocastgen PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
foreach(lib autocastgen_runtime_torch autocastgen_runtime_torch_cuda autocastgen_kernels autocastgen_kernels_cuda)
  if(TARGET ${lib} AND NOT AUTOCASTGEN_RUNTIMES_PER_RELEASE)  # the wheel's are per release
    list(APPEND install_targets ${lib})
    string(REPLACE "autocastgen_" "" export_name ${lib})
    set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name} INSTALL_RPATH "$ORIGIN")
  endif()
endforeach()

install(TARGETS ${install_targets} EXPORT autocastgenTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir kernels/common/include kernels/cpu/include kernels/cuda/include)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endforeach()
# Templates and shipped policies: starting points for users' own (--templates, extends:).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/templates/ DESTINATION ${CMAKE_INSTALL_DATADIR}/autocastgen/templates)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/schemas/policies/ DESTINATION ${CMAKE_INSTALL_DATADIR}/autocastgen/policies)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/autocastgen)
install(EXPORT autocastgenTargets NAMESPACE autocastgen:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/autocastgenConfig.cmake.in
  ${PROJECT_BINARY_DIR}/autocastgenConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/autocastgenConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/autocastgenConfig.cmake ${PROJECT_BINARY_DIR}/autocastgenConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/AutocastgenOps.cmake ${PROJECT_SOURCE_DIR}/cmake/AutocastgenTorch.cmake
  DESTINATION ${config_dir})

# The importer plugin, loaded by the CLI from ../lib (not part of the CMake package's targets).
if(TARGET autocastgen_import)
  install(TARGETS autocastgen_import LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# Every target `cmake --install` copies, the one list: what builds from the installed package
# (examples/privateuse1) depends on exactly these, so a newly installed target is built first.
set(AUTOCASTGEN_INSTALLED_TARGETS ${install_targets})
if(TARGET autocastgen_import)
  list(APPEND AUTOCASTGEN_INSTALLED_TARGETS autocastgen_import)
endif()

# Note [the pip package's layout]
# Under scikit-build-core (pyproject.toml) the install prefix is site-packages/autocastgen, the
# Python package's own folder: bin/autocastgen, lib/libautocastgen_runtime_torch.so,
# lib/cmake/autocastgen, include/, share/autocastgen/{templates,policies} sit beside __init__.py.
# The runtime finds libtorch through torch being imported first (autocastgen/_core/runtime.py imports
# it), through the build machine's torch/lib (the link's -rpath), or through site-packages/torch/lib
# beside us ($ORIGIN/../../torch/lib) when torch and autocastgen share a site-packages.
# _build_info.py records the torch the wheel was built against; importing checks it.
if(SKBUILD AND TARGET autocastgen_runtime_torch)
  set_target_properties(autocastgen_runtime_torch PROPERTIES INSTALL_RPATH "$ORIGIN;$ORIGIN/../../torch/lib")
  if(TARGET autocastgen_runtime_torch_cuda)
    set_target_properties(autocastgen_runtime_torch_cuda PROPERTIES INSTALL_RPATH "$ORIGIN;$ORIGIN/../../torch/lib")
  endif()
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py CONTENT
"\"\"\"How this autocastgen package was built (written by cmake/AutocastgenInstall.cmake).\"\"\"

VERSION = \"${PROJECT_VERSION}\"
TORCH_VERSION = \"${AUTOCASTGEN_TORCH_VERSION}\"
TORCH_CUDA_VERSION = \"${AUTOCASTGEN_TORCH_CUDA_VERSION}\"
")
  install(FILES ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py DESTINATION .)
endif()
if(AUTOCASTGEN_RUNTIMES_PER_RELEASE)  # the wheel's: its version; the releases are its _runtime/ folders
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py CONTENT
"\"\"\"How this autocastgen package was built (written by cmake/AutocastgenInstall.cmake for scripts/wheel).\"\"\"

VERSION = \"${PROJECT_VERSION}\"
TORCH_VERSION = \"\"  # one runtime per release: _runtime/torch-X.Y/build_info.json
TORCH_CUDA_VERSION = \"\"
")
  install(FILES ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py DESTINATION .)
endif()
