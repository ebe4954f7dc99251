// The CLI's configured values (Note [one CLI for every build] in build_config.h).
#include "cli/build_config.h"

namespace autocastgen::cli {

extern const bool kHaveImporter = AUTOCASTGEN_HAVE_IMPORTER;
extern const bool kPipPackage = AUTOCASTGEN_PIP_PACKAGE;
extern const char* const kDefaultNativeFunctions = AUTOCASTGEN_DEFAULT_NATIVE_FUNCTIONS;

}  // namespace autocastgen::cli
