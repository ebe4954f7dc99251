# Script mode: writes OUTPUT, a C++ file defining `const char NAMESPACE::SYMBOL[]` with INPUT's text.
# Usage: cmake -DINPUT=... -DOUTPUT=... -DNAMESPACE=... -DSYMBOL=... -P EmbedFile.cmake
file(READ "${INPUT}" text)
string(FIND "${text}" ")acg_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )acg_embed\"")
endif()
set(body "// @generated from ${INPUT_NAME} by cmake/EmbedFile.cmake. Do not edit.\nnamespace ${NAMESPACE} {\nextern const char ${SYMBOL}[];\nconst char ${SYMBOL}[] = R\"acg_embed(${text})acg_embed\";\n}  // namespace ${NAMESPACE}\n")
# Rewrite only on change, so an unchanged input rebuilds nothing.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL body)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${body}")
