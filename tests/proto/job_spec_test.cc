// Job spec JSON: defaults, and refusals that name the offending field.
#include "proto/job_spec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proto/strict_json.h"

namespace marlaas {
namespace {

std::string ErrorOf(const std::string& json) {
  auto r = ParseJobSpecJson(json);
  EXPECT_FALSE(r.ok()) << json;
  return r.ok() ? "" : r.status().message();
}

TEST(JobSpecTest, MinimalSpecGetsDocumentedDefaults) {
  auto r = ParseJobSpecJson(R"({"tenant": "alice", "task": "countdown"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lora().rank(), 8u);
  EXPECT_FLOAT_EQ(r->lora().alpha(), 16.0f);
  EXPECT_EQ(r->lora().targets_size(), 7);
  EXPECT_EQ(r->group_size(), 8u);
  EXPECT_EQ(r->prompts_per_step(), 4u);
  EXPECT_EQ(r->max_staleness(), 1u);
  EXPECT_FLOAT_EQ(r->sampling().temperature(), 1.0f);
  EXPECT_TRUE(r->grpo().normalize_std());
  EXPECT_EQ(r->sandbox().timeout_ms(), 2000u);
  EXPECT_EQ(r->tool_result_timeout_ms(), 30000u);
}

TEST(JobSpecTest, ExplicitValuesAndCamelCaseNamesAreKept) {
  auto r = ParseJobSpecJson(
      R"({"tenant": "b-2", "task": "arithmetic", "lora": {"rank": 16, "targets": ["q_proj"]},
          "groupSize": 4, "max_staleness": 0, "optimizer": {"schedule": "cosine"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lora().rank(), 16u);
  EXPECT_FLOAT_EQ(r->lora().alpha(), 32.0f);
  ASSERT_EQ(r->lora().targets_size(), 1);
  EXPECT_EQ(r->group_size(), 4u);
  EXPECT_EQ(r->max_staleness(), 0u);  // an explicit 0 is not replaced by the default
  EXPECT_EQ(r->optimizer().schedule(), "cosine");
}

TEST(JobSpecTest, UnknownFieldsAreRefusedByName) {
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "grup_size": 4})"),
            "job spec field 'grup_size': unknown field");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "lora": {"rnk": 4}})"),
            "job spec field 'lora.rnk': unknown field");
}

TEST(JobSpecTest, OutOfRangeValuesAreRefusedByName) {
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "lora": {"rank": 0}})"),
            "job spec field 'lora.rank': 0 is out of range [1, 64]");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "group_size": 1})"),
            "job spec field 'group_size': 1 is out of range [2, 256]");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "sampling": {"temperature": 0}})"),
            "job spec field 'sampling.temperature': 0 is out of range [0.01, 4]");
  // A tiny temperature passed (0, 4]: below 3e-39, 1/T is infinite and every weight NaN.
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "sampling": {"temperature": 1e-30}})"),
            "job spec field 'sampling.temperature': 1e-30 is out of range [0.01, 4]");
  EXPECT_TRUE(ParseJobSpecJson(
                  R"({"tenant": "a", "task": "arithmetic", "sampling": {"temperature": 0.01}})")
                  .ok());
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "max_staleness": 17})"),
            "job spec field 'max_staleness': 17 is out of range [0, 16]");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "tool_result_timeout_ms": 99})"),
            "job spec field 'tool_result_timeout_ms': 99 is out of range [100, 3600000]");
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "group_size": -3})")
                .find("job spec field 'group_size'"),
            std::string::npos);
}

TEST(JobSpecTest, BadNamesTasksAndTargetsAreRefused) {
  EXPECT_NE(ErrorOf(R"({"tenant": "Alice!", "task": "arithmetic"})").find("field 'tenant'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "-a", "task": "arithmetic"})").find("must not start with '-'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "chess"})").find("field 'task': 'chess'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "lora": {"targets": ["qkv"]}})")
                .find("field 'lora.targets': 'qkv'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "custom"})").find("'dataset.jsonl_path'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "verifier": {"command": ["x"]}})")
                .find("'verifier.command'"),
            std::string::npos);
  // A built-in task generates its examples: a dataset file beside it was silently ignored.
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "dataset": {"jsonl_path": "/d"}})")
                .find("field 'dataset.jsonl_path': only task 'custom' reads a dataset file; "
                      "'arithmetic' generates its own examples"),
            std::string::npos);
  // The sandbox has no search path: a bare program name would fail every group at run time.
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "custom", "dataset": {"jsonl_path": "/d.jsonl"},
                        "verifier": {"command": ["python3", "v.py"]}})")
                .find("'verifier.command': its first item 'python3' must be the program's "
                      "absolute path"),
            std::string::npos);
}

TEST(JobSpecTest, MalformedJsonIsRefused) {
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": )").find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(LoadJobSpecFile("/nonexistent/job.json").ok());
}

// What protobuf's JSON parser lets through without a word is refused, by position or by name: a
// trailing comma, a comment, and a key given twice (the last "tenant" used to win).
TEST(JobSpecTest, TrailingCommasCommentsAndDuplicateKeysAreRefused) {
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic",})")
                .find("job spec is not valid JSON (line 1, column 38: syntax error while parsing "
                      "object key"),
            std::string::npos)
      << ErrorOf(R"({"tenant": "a", "task": "arithmetic",})");
  EXPECT_NE(ErrorOf("{\"tenant\": \"a\",\n \"task\": \"arithmetic\" // mine\n}")
                .find("job spec is not valid JSON (line 2"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "tenant": "b"})"),
            "job spec names key 'tenant' twice");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic",
                        "sampling": {"temperature": 1, "temperature": 0.5}})"),
            "job spec names key 'sampling.temperature' twice");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "custom", "dataset": {"jsonl_path": "/d.jsonl"},
                        "verifier": {"command": ["/bin/true"],
                                     "files": {"a.py": "x", "b.py": "y", "a.py": "z"}}})"),
            "job spec names key 'verifier.files.a.py' twice");
  // Protobuf takes a field by either of its names, and merges the two: one field named twice.
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "max_steps": 5, "maxSteps": 9})"),
            "job spec names key 'maxSteps' twice (as 'max_steps' and 'maxSteps')");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic",
                        "sampling": {"maxNewTokens": 8, "max_new_tokens": 9}})"),
            "job spec names key 'sampling.max_new_tokens' twice (as 'maxNewTokens' and "
            "'max_new_tokens')");
  // A bool field takes true or false: protobuf took "yes" (and "no") without a word.
  for (const char* v : {R"("yes")", R"("true")", "1"}) {
    EXPECT_EQ(
        ErrorOf(std::string(R"({"tenant": "a", "task": "arithmetic", "grpo": {"normalize_std": )") +
                v + "}}"),
        "job spec gives key 'grpo.normalize_std' a value that is not true or false")
        << v;
  }
  // A list field takes a list: protobuf took one string as a list of one, so a command line
  // written as a string became one program named "/usr/bin/python3 check.py".
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "custom", "dataset": {"jsonl_path": "/d.jsonl"},
                        "verifier": {"command": "/usr/bin/python3 check.py"}})"),
            "job spec gives key 'verifier.command' one value where it takes a list ([...])");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "lora": {"targets": "q_proj"}})"),
            "job spec gives key 'lora.targets' one value where it takes a list ([...])");
  EXPECT_EQ(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "lora": {"targets": {"q": 1}}})"),
            "job spec gives key 'lora.targets' one value where it takes a list ([...])");
  // A byte-order mark before the JSON is skipped; an empty file name is named as such.
  auto marked = ParseJobSpecJson("\xEF\xBB\xBF{\"tenant\": \"a\", \"task\": \"arithmetic\"}");
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_EQ(marked->tenant(), "a");
  EXPECT_EQ(LoadJobSpecFile("").status().message(), "the job spec's file name is empty");
  auto lists = ParseJobSpecJson(
      R"({"tenant": "a", "task": "arithmetic", "lora": {"targets": ["q_proj", "v_proj"]}})");
  ASSERT_TRUE(lists.ok()) << lists.status().ToString();
  EXPECT_EQ(lists->lora().targets_size(), 2);
  EXPECT_TRUE(
      ParseJobSpecJson(R"({"tenant": "a", "task": "arithmetic", "lora": {"targets": null}})")
          .ok());  // unset: the default, as protobuf reads null
  auto unset =
      ParseJobSpecJson(R"({"tenant": "a", "task": "arithmetic", "grpo": {"normalizeStd": false}})");
  ASSERT_TRUE(unset.ok()) << unset.status().ToString();
  EXPECT_FALSE(unset->grpo().normalize_std());
  // A map's keys are the user's: two that would be one field's names are two files.
  auto files = ParseJobSpecJson(R"({"tenant": "a", "task": "custom",
      "dataset": {"jsonl_path": "/d.jsonl"},
      "verifier": {"command": ["/bin/true"], "files": {"a_b": "eA==", "aB": "eQ=="}}})");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->verifier().files().size(), 2u);
  // The same key in different objects, and in the objects of an array, is no duplicate.
  EXPECT_TRUE(CheckStrictJson(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})").ok());
  EXPECT_EQ(CheckStrictJson(R"({"c": [{"x": 1}, {"x": 2, "x": 3}]})").message(),
            "names key 'c[1].x' twice");
  EXPECT_EQ(CheckStrictJson(R"([1, [2, {"k": 0, "k": 1}]])").message(),
            "names key '[1][1].k' twice");
  EXPECT_NE(CheckStrictJson(R"({"a": 1} x)").message().find("is not valid JSON (line 1, column 10"),
            std::string::npos)
      << CheckStrictJson(R"({"a": 1} x)").message();
}

// A value of the wrong kind is named with what the field takes, where protobuf said "Starting an
// object on a scalar field", "Proto field is not repeating, cannot start list", "Proto fields
// must have a name" or "invalid value ... for type TYPE_UINT32"; a NUL in a string (which cut a
// command or a path short) and nesting deeper than any job spec are refused.
TEST(JobSpecTest, ValuesOfTheWrongKindAreNamedWithWhatTheFieldTakes) {
  const std::string head = R"({"tenant": "a", "task": "arithmetic", )";
  EXPECT_EQ(ErrorOf(head + R"("group_size": {"a": 1}})"),
            "job spec gives key 'group_size' an object where it takes a whole number");
  EXPECT_EQ(ErrorOf(head + R"("group_size": [8]})"),
            "job spec gives key 'group_size' a list where it takes a whole number");
  EXPECT_EQ(ErrorOf(head + R"("group_size": "x"})"),
            "job spec field 'group_size': \"x\" is not a "
            "whole number");
  EXPECT_EQ(ErrorOf(head + R"("sampling": {"temperature": "warm"}})"),
            "job spec field 'sampling.temperature': \"warm\" is not a number");
  EXPECT_EQ(ErrorOf(head + R"("sampling": [1]})"),
            "job spec gives key 'sampling' a list where it takes an object ({...})");
  EXPECT_EQ(ErrorOf(head + R"("sampling": 5})"),
            "job spec gives key 'sampling' one value where it takes an object ({...})");
  EXPECT_EQ(ErrorOf(head + R"("lora": {"targets": [["q_proj"]]}})"),
            "job spec gives key 'lora.targets[0]' a list where it takes a string");
  EXPECT_EQ(ErrorOf(head + R"("grpo": {"normalize_std": {}}})"),
            "job spec gives key 'grpo.normalize_std' an object where it takes true or false");
  const std::string custom =
      R"({"tenant": "a", "task": "custom", "dataset": {"jsonl_path": "/d.jsonl"}, "verifier": )";
  EXPECT_EQ(ErrorOf(custom + R"({"command": ["/bin/true"], "files": {"a.py": {"b": 1}}}})"),
            "job spec gives key 'verifier.files.a.py' an object where it takes a base64 string");
  EXPECT_EQ(ErrorOf(custom + R"({"command": ["/bin/true"], "files": ["a.py"]}})"),
            "job spec gives key 'verifier.files' a list where it takes an object ({...})");
  EXPECT_EQ(ErrorOf(custom + R"({"command": ["/bin/tr\u0000ue"]}})"),
            "job spec gives key 'verifier.command[0]' a string with a NUL character (\\u0000) in "
            "it");
  EXPECT_EQ(ErrorOf(head + R"("tena\u0000nt": "b"})"),
            "job spec names a key with a NUL character (\\u0000) in it");
  EXPECT_EQ(ErrorOf("[1]"), "job spec is a list, not an object ({...})");
  EXPECT_EQ(ErrorOf("7"), "job spec is one value, not an object ({...})");
  std::string deep = head + R"("extra": )";
  for (int i = 0; i < 100000; ++i) deep += "[";
  EXPECT_EQ(ErrorOf(deep),
            "job spec nests objects and lists more than 32 deep, at key 'extra[0][0][0][0][0][0][0]"
            "[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]'");
  // Null still means unset, for a message as for a list.
  EXPECT_TRUE(ParseJobSpecJson(head + R"("sampling": null})").ok());
  // A value quoted back is cut at 80 bytes (a 1 MiB one made the reply too large to send).
  EXPECT_EQ(ErrorOf(R"({"tenant": ")" + std::string(100000, 'x') + R"(", "task": "arithmetic"})"),
            "job spec field 'tenant': '" + std::string(80, 'x') +
                "...' must be 1-63 characters of [a-z0-9_-]");
  // More verifier files than its sandbox takes are refused at submit, not at the first check.
  std::string many = custom + R"({"command": ["/bin/true"], "files": {)";
  for (int i = 0; i < 257; ++i) many += (i ? "," : "") + ("\"f" + std::to_string(i) + "\": \"\"");
  EXPECT_EQ(ErrorOf(many + "}}}"),
            "job spec field 'verifier.files': 257 files, more than the 256 "
            "allowed");
}

// A custom job file for tenant u1 with this "verifier" object.
void WriteCustomJob(const std::string& path, const std::string& verifier) {
  std::ofstream(path) << R"({"tenant": "u1", "task": "custom",
      "dataset": {"jsonl_path": "/data/prompts.jsonl"}, "verifier": )"
                      << verifier << "}";
}

// A custom verifier's script travels inside the job, read on the client with the user's rights;
// the arguments that named it become plain names of the sandbox's work dir.
TEST(JobSpecTest, UserJobFilesTravelInTheJobNotAsHostPaths) {
  const std::string dir = ::testing::TempDir() + "/userjob" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  const std::string script = R"(print('{"reward": 1}'))"
                             "\n";
  std::ofstream(dir + "/check.py") << script;
  WriteCustomJob(dir + "/job.json", R"({"command": ["/usr/bin/python3", "check.py", "--strict"]})");
  auto r = LoadUserJobSpec(dir + "/job.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->verifier().command_size(), 3);
  EXPECT_EQ(r->verifier().command(0), "/usr/bin/python3");  // the interpreter, inside the sandbox
  EXPECT_EQ(r->verifier().command(1), "check.py");
  EXPECT_EQ(r->verifier().command(2), "--strict");
  ASSERT_EQ(r->verifier().files().count("check.py"), 1u);
  EXPECT_EQ(r->verifier().files().at("check.py"), script);
  // Plain parsing (what the service does with a stored job) reads nothing.
  auto plain = LoadJobSpecFile(dir + "/job.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->verifier().files_size(), 0);
  // Two files that would share a name in the work dir are refused, naming both (the last won);
  // the same file twice, or the same text, is one file.
  ::mkdir((dir + "/a").c_str(), 0755);
  ::mkdir((dir + "/b").c_str(), 0755);
  std::ofstream(dir + "/a/chk.py") << "print('a')\n";
  std::ofstream(dir + "/b/chk.py") << "print('b')\n";
  WriteCustomJob(dir + "/clash.json",
                 R"({"command": ["/usr/bin/python3", "a/chk.py", "b/chk.py"]})");
  auto clash = LoadUserJobSpec(dir + "/clash.json");
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().message(),
            dir +
                "/clash.json: verifier.command item 'a/chk.py' and verifier.command item "
                "'b/chk.py' would both be the sandbox's file 'chk.py' with different contents: "
                "give them different names");
  WriteCustomJob(dir + "/given.json",
                 R"({"command": ["/usr/bin/python3", "a/chk.py"], "files": {"chk.py": "eA=="}})");
  auto given = LoadUserJobSpec(dir + "/given.json");
  ASSERT_FALSE(given.ok());
  EXPECT_NE(given.status().message().find("verifier.files 'chk.py' and verifier.command item "
                                          "'a/chk.py'"),
            std::string::npos)
      << given.status().message();
  WriteCustomJob(dir + "/twice.json",
                 R"({"command": ["/usr/bin/python3", "a/chk.py", "a/../a/chk.py"]})");
  auto twice = LoadUserJobSpec(dir + "/twice.json");
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  EXPECT_EQ(twice->verifier().files_size(), 1);
  // Names that would leave the work dir, and files for a built-in task, are refused by field.
  const std::string custom = R"({"tenant": "a", "task": "custom", "dataset": {"jsonl_path": "p"},
      "verifier": {"command": ["/bin/sh", "x"], "files": {)";
  EXPECT_NE(ErrorOf(custom + R"("../x": "eA=="}}})").find("field 'verifier.files': '../x'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"tenant": "a", "task": "arithmetic", "verifier": {"files": {"x": ""}}})")
                .find("'verifier.files'"),
            std::string::npos);
}

// A relative dataset path names the job file's neighbour, wherever the service runs; an
// absolute one is kept.
TEST(JobSpecTest, AUserJobsRelativeDatasetPathIsTheJobFilesNeighbour) {
  const std::string dir = ::testing::TempDir() + "/userjobdata" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/job.json") << R"({"tenant": "u2", "task": "custom",
      "dataset": {"jsonl_path": "data/../prompts.jsonl"},
      "verifier": {"command": ["/bin/true"]}})";
  auto r = LoadUserJobSpec(dir + "/job.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string expected =
      std::filesystem::absolute(dir + "/prompts.jsonl").lexically_normal().string();
  EXPECT_EQ(r->dataset().jsonl_path(), expected);
  EXPECT_EQ(r->dataset().jsonl_path()[0], '/');
  std::ofstream(dir + "/abs.json") << R"({"tenant": "u3", "task": "custom",
      "dataset": {"jsonl_path": "/data/p.jsonl"}, "verifier": {"command": ["/bin/true"]}})";
  auto a = LoadUserJobSpec(dir + "/abs.json");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dataset().jsonl_path(), "/data/p.jsonl");
}

TEST(JobSpecTest, CanonicalJsonRoundTrips) {
  auto r = ParseJobSpecJson(R"({"tenant": "a", "task": "arithmetic"})");
  ASSERT_TRUE(r.ok());
  auto again = ParseJobSpecJson(JobSpecToJson(*r));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->SerializeAsString(), r->SerializeAsString());
}

}  // namespace
}  // namespace marlaas
