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
