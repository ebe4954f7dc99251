# Linking what the wheel ships so that it runs on glibc 2.31 and GCC 10's libstdc++
# (manylinux_2_31): Note [linking for manylinux_2_31] in scripts/torch-releases, whose
# `manylinux` verb makes the folder -DAUTOCASTGEN_MANYLINUX names (scripts/wheel sets it).
#   autocastgen_link_for_manylinux()  after finding yaml-cpp and fmt, before any target
# Compile flags are left as they are (ccache serves the wheel's builds what build/ compiled); only
# the links change: that folder's link options (link/options.txt) on every target, and yaml-cpp,
# fmt and libcrypto linked statically.

set(AUTOCASTGEN_MANYLINUX "" CACHE PATH
  "Link for manylinux_2_31 with this folder (scripts/torch-releases manylinux; the wheel's builds)")

macro(autocastgen_link_for_manylinux)
  if(AUTOCASTGEN_MANYLINUX)
    if(NOT EXISTS "${AUTOCASTGEN_MANYLINUX}/link/options.txt")
      message(FATAL_ERROR "autocastgen: AUTOCASTGEN_MANYLINUX=${AUTOCASTGEN_MANYLINUX} is not a folder "
                          "made by `scripts/torch-releases manylinux` (it has no link/options.txt)")
    endif()
    file(STRINGS "${AUTOCASTGEN_MANYLINUX}/link/options.txt" _acg_manylinux_options)
    add_link_options(${_acg_manylinux_options})
    _autocastgen_link_static_instead(yaml-cpp "${AUTOCASTGEN_MANYLINUX}/deps/lib/libyaml-cpp.a")
    _autocastgen_link_static_instead(fmt::fmt "${AUTOCASTGEN_MANYLINUX}/deps/lib/libfmt.a")
    # The CLI's libcrypto (codegen/): Debian's libcrypto.a, beside the libcrypto.so found.
    find_package(OpenSSL REQUIRED COMPONENTS Crypto)
    get_filename_component(_acg_openssl_lib "${OPENSSL_CRYPTO_LIBRARY}" DIRECTORY)
    _autocastgen_link_static_instead(OpenSSL::Crypto "${_acg_openssl_lib}/libcrypto.a")
    set_property(TARGET OpenSSL::Crypto APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${CMAKE_DL_LIBS})
    message(STATUS "autocastgen: linking for manylinux_2_31 with ${AUTOCASTGEN_MANYLINUX}")
  endif()
endmacro()

# An imported shared library linked from a static archive of the same version instead (its headers,
# and so the compile, unchanged). An old-ABI build's yaml-cpp is static and its fmt header-only
# already (Note [one string ABI per program]): left as they are.
function(_autocastgen_link_static_instead target archive)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    return()
  endif()
  set(properties IMPORTED_LOCATION)
  get_target_property(configurations ${target} IMPORTED_CONFIGURATIONS)
  if(configurations)  # FindOpenSSL's target has none
    foreach(configuration IN LISTS configurations)
      list(APPEND properties IMPORTED_LOCATION_${configuration})
    endforeach()
  endif()
  set(locations "")
  foreach(property IN LISTS properties)
    get_target_property(location ${target} ${property})
    if(location)
      list(APPEND locations "${location}")
    endif()
  endforeach()
  if(NOT locations MATCHES "\\.so")
    return()
  endif()
  if(NOT EXISTS "${archive}")
    message(FATAL_ERROR "autocastgen: ${archive} is missing: remake it with `scripts/torch-releases manylinux`")
  endif()
  foreach(property IN LISTS properties)
    set_target_properties(${target} PROPERTIES ${property} "${archive}")
  endforeach()
  set_target_properties(${target} PROPERTIES IMPORTED_NO_SONAME TRUE)
endfunction()
