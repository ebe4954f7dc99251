// The importer lives in a plugin (libautocastgen_import.so, linking Clang) that the CLI loads only
// when a verb needs it, so the other verbs start without loading libLLVM and libclang-cpp.
#pragma once

#include "import/importer.h"

namespace autocastgen::import {

using ImportRegistrationsFn = decltype(&import_registrations);

struct ImporterApi {
  ImportRegistrationsFn run;  // import_registrations
};

// Loads the plugin from the library directory beside the running executable (`../lib`, in the
// build tree and after install); reports an error and returns nullptr when it cannot.
[[nodiscard]] const ImporterApi* load_importer(DiagnosticEngine& diags);

}  // namespace autocastgen::import

// The plugin's one exported entry point.
extern "C" const autocastgen::import::ImporterApi* autocastgen_importer_api();
