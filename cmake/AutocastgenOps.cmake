# add_autocast_ops(): generates autocast wrappers at build time and adds them to a target.
#
#   add_autocast_ops(<target> POLICY <file> [SCHEMAS <file>...] [DISPATCH_KEY <key>]
#                    [TEMPLATES <dir>] [OUTPUT_DIR <dir>] [STATE torch|autocastgen]
#                    [NAME <name>] [NO_FALLTHROUGH] [SHARDS <n>])
#
# The generator runs when the policy (or any file it extends), a schema file, a template or the
# generator itself changes, and only then; an output whose content did not change keeps its
# timestamp, so nothing recompiles. <target> gets the generated source and links the runtime.
# SHARDS <n> (1 to 64, default 1) splits the wrappers into n source files, compiled in parallel:
# autocast_<name>.cpp, autocast_<name>.shard2.cpp ... autocast_<name>.shard<n>.cpp (`generate
# --shards`, docs/cmake.md).
# Needs the targets autocastgen::autocastgen (the CLI) and autocastgen::runtime_torch, which the
# autocastgen build tree and find_package(autocastgen) both provide.
function(add_autocast_ops target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_FALLTHROUGH" "POLICY;DISPATCH_KEY;TEMPLATES;OUTPUT_DIR;STATE;NAME;SHARDS" "SCHEMAS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "add_autocast_ops(${target}): unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "add_autocast_ops(${target}): no such target")
  endif()
  if(NOT arg_POLICY)
    message(FATAL_ERROR "add_autocast_ops(${target}): POLICY <file> is required")
  endif()
  get_filename_component(policy "${arg_POLICY}" ABSOLUTE)
  if(NOT EXISTS "${policy}")
    message(FATAL_ERROR "add_autocast_ops(${target}): policy file ${policy} does not exist")
  endif()
  if(arg_NAME)
    set(name "${arg_NAME}")
  else()
    get_filename_component(name "${policy}" NAME_WE)
  endif()
  if(arg_OUTPUT_DIR)
    get_filename_component(out "${arg_OUTPUT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(out "${CMAKE_CURRENT_BINARY_DIR}/autocastgen_${name}")
  endif()
  if(arg_STATE AND NOT arg_STATE MATCHES "^(torch|autocastgen)$")
    message(FATAL_ERROR "add_autocast_ops(${target}): STATE must be torch or autocastgen, not '${arg_STATE}'")
  endif()

  set(shards 1)
  if(DEFINED arg_SHARDS)
    # The generator's own limit (emit::kMaxShards); checked here too, so the mistake shows at configure time.
    if(NOT arg_SHARDS MATCHES "^[1-9][0-9]*$" OR arg_SHARDS GREATER 64)
      message(FATAL_ERROR "add_autocast_ops(${target}): SHARDS must be a whole number from 1 to 64, not '${arg_SHARDS}'")
    endif()
    set(shards ${arg_SHARDS})
  endif()

  # Note [shards] in codegen/emit/torch_target.h: shard 1 keeps the unsharded file's name.
  set(cpp "${out}/autocast_${name}.cpp")
  if(shards GREATER 1)
    foreach(shard RANGE 2 ${shards})
      list(APPEND cpp "${out}/autocast_${name}.shard${shard}.cpp")
    endforeach()
  endif()
  set(manifest "${out}/autocast_${name}.manifest.json")
  set(depfile "${out}/autocast_${name}.d")
  set(command $<TARGET_FILE:autocastgen::autocastgen> generate --target torch --policy "${policy}"
      --out "${out}" --name "${name}" --depfile "${depfile}")
  if(shards GREATER 1)
    list(APPEND command --shards ${shards})
  endif()
  set(depends "${policy}" autocastgen::autocastgen)
  # The PyTorch this build compiles against decides the release gates (and the @generated line);
  # without SCHEMAS its own native_functions.yaml is the op set.
  if(AUTOCASTGEN_TORCH_VERSION MATCHES "^([0-9]+\\.[0-9]+(\\.[0-9]+)?)")
    list(APPEND command --torch-version "${CMAKE_MATCH_1}")
  endif()
  if(NOT arg_SCHEMAS AND AUTOCASTGEN_NATIVE_FUNCTIONS)
    list(APPEND command --schemas "${AUTOCASTGEN_NATIVE_FUNCTIONS}")
    list(APPEND depends "${AUTOCASTGEN_NATIVE_FUNCTIONS}")
  endif()
  foreach(schema IN LISTS arg_SCHEMAS)
    get_filename_component(schema "${schema}" ABSOLUTE)
    list(APPEND command --schemas "${schema}")
    list(APPEND depends "${schema}")
  endforeach()
  if(arg_TEMPLATES)
    get_filename_component(templates "${arg_TEMPLATES}" ABSOLUTE)
    file(GLOB template_files CONFIGURE_DEPENDS "${templates}/*.mustache")
    list(APPEND command --templates "${templates}")
    list(APPEND depends ${template_files})
  endif()
  if(arg_DISPATCH_KEY)
    list(APPEND command --dispatch-key "${arg_DISPATCH_KEY}")
  endif()
  if(arg_STATE)
    list(APPEND command --state "${arg_STATE}")
  endif()
  if(arg_NO_FALLTHROUGH)
    list(APPEND command --no-fallthrough)
  endif()

  # The depfile adds the whole extends chain; the generator rewrites outputs only on change.
  add_custom_command(
    OUTPUT ${cpp} "${manifest}"
    COMMAND ${command}
    DEPENDS ${depends}
    DEPFILE "${depfile}"
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    COMMENT "autocastgen: generating autocast wrappers for ${name}"
    VERBATIM)
  target_sources(${target} PRIVATE ${cpp})
  target_link_libraries(${target} PRIVATE autocastgen::runtime_torch)
  set_property(TARGET ${target} APPEND PROPERTY AUTOCASTGEN_MANIFESTS "${manifest}")
endfunction()
