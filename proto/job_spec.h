// Job specs: parsing a user's JSON into a JobSpec, filling defaults, and refusing anything
// unknown or out of range with the field named (e.g. "job spec field 'lora.rank': 0 is out of
// range [1, 64]"). The defaults and ranges are documented next to each field in marlaas.proto.
// Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/marlaas.pb.h"

namespace marlaas {

// The task names a JobSpec may use.
const std::vector<std::string>& KnownTasks();

// JSON text -> validated JobSpec with every optional field filled in.
Result<pb::JobSpec> ParseJobSpecJson(const std::string& text);
// Reads and parses a job spec file.
Result<pb::JobSpec> LoadJobSpecFile(const std::string& path);
// The client side of a user's job file: LoadJobSpecFile, then every verifier.command argument
// after the first that names a readable regular file (absolute, or relative to the job file's
// folder) is read into verifier.files under its base name and replaced by that name.
Result<pb::JobSpec> LoadUserJobSpec(const std::string& path);
// Range and consistency checks on the fields that are present.
Status ValidateJobSpec(const pb::JobSpec& spec);
// A tenant id: 1-63 characters of [a-z0-9_-] (it names a folder of the state dir).
bool ValidTenantId(const std::string& id);
// Fills every absent optional field with its default. Idempotent.
void ApplyJobSpecDefaults(pb::JobSpec* spec);
// The canonical JSON form (all fields, snake_case), for the state dir and `status`.
std::string JobSpecToJson(const pb::JobSpec& spec);

}  // namespace marlaas
