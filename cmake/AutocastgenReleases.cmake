# The supported PyTorch releases of one role (codegen, headers, installed), as scripts/torch-releases
# lists them: the one place tests get the release matrix from.
#   autocastgen_torch_releases(<out-var> <role>)   -> e.g. 2.4.1;2.5.1;...
function(autocastgen_torch_releases out role)
  execute_process(COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/torch-releases list --${role}
    OUTPUT_VARIABLE releases OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  string(REPLACE "\n" ";" releases "${releases}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/scripts/torch-releases)
  set(${out} "${releases}" PARENT_SCOPE)
endfunction()
