# Install rules and the CMake package: `cmake --install` then find_package(autocastgen CONFIG).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(install_targets autocastgen)
set_target_properties(autocastgen PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
foreach(lib autocastgen_runtime_torch autocastgen_kernels autocastgen_kernels_cuda)
  if(TARGET ${lib})
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
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py CONTENT
"\"\"\"How this autocastgen package was built (written by cmake/AutocastgenInstall.cmake).\"\"\"

VERSION = \"${PROJECT_VERSION}\"
TORCH_VERSION = \"${AUTOCASTGEN_TORCH_VERSION}\"
TORCH_CUDA_VERSION = \"${AUTOCASTGEN_TORCH_CUDA_VERSION}\"
")
  install(FILES ${PROJECT_BINARY_DIR}/python_build_info/_build_info.py DESTINATION .)
endif()
