// `audit coverage`: what a policy lists, and the eligible ops no list covers, grouped into families.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audit/families.h"
#include "audit/inputs.h"
#include "model/schema_set.h"

namespace autocastgen::audit {

struct UncoveredOp {
  std::string op;                                       // `name` or `ns::name`
  std::vector<const model::FunctionSchema*> overloads;  // eligible and in no list, declaration order
  std::vector<const policy::ResolvedEntry*> listed;             // its other overloads that a list covers
};

struct FamilyGroup {
  const OpFamily* family;
  std::vector<UncoveredOp> ops;  // sorted by name
  size_t overloads = 0;
};

struct CoverageReport {
  const policy::ResolvedPolicy* policy = nullptr;
  std::vector<std::string> schema_files;  // as reports print them
  size_t eligible = 0;                     // eligible overloads in the schemas
  size_t covered = 0;                      // of those, listed
  size_t uncovered_ops = 0;
  std::vector<FamilyGroup> families;       // in table order; families without candidates left out
};

// `schema_files` only names the inputs in the report.
[[nodiscard]] CoverageReport compute_coverage(const policy::ResolvedPolicy& policy, const model::SchemaSet& schemas,
                                              std::vector<std::string> schema_files);

[[nodiscard]] std::string coverage_markdown(const CoverageReport& report, const SourceManager& sources);
[[nodiscard]] nlohmann::ordered_json coverage_json(const CoverageReport& report, const SourceManager& sources);

}  // namespace autocastgen::audit
