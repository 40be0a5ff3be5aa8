// The checkpoint manifest (docs/checkpoints.md): a round trip, every
// refusal a loader relies on (before any table changes), and the XXH3-64
// checksums the files are checked with.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <functional>

#include "shardrec/core/checkpoint/checksum.h"
#include "shardrec/core/checkpoint/manifest.h"
#include "shardrec/core/version.h"

namespace shardrec {
namespace {

using json = nlohmann::json;

EmbeddingTableConfig Table(const std::string& name, int64_t rows, int64_t dim) {
  EmbeddingTableConfig t;
  t.name = name;
  t.num_embeddings = rows;
  t.embedding_dim = dim;
  t.feature_names = {"f_" + name};
  return t;
}

CheckpointFile File(const std::string& table, const std::string& kind, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1) {
  CheckpointFile f;
  f.table = table;
  f.kind = kind;
  f.row_begin = r0;
  f.row_end = r1;
  f.col_begin = c0;
  f.col_end = c1;
  f.path = "tables/" + table + "/" + kind + ".r" + std::to_string(r0) + "-" + std::to_string(r1) + ".c" +
           std::to_string(c0) + "-" + std::to_string(c1) + ".npy";
  f.dtype = "<f4";
  f.shape = {r1 - r0, KindIsPerColumn(kind) ? c1 - c0 : 1};
  f.bytes = 128 + f.shape[0] * f.shape[1] * 4;
  f.xxh3_64 = "0123456789abcdef";
  return f;
}

// Table a (10 x 4) row-split in two; table b (6 x 8) column-split in two,
// each with its Adagrad sums.
CheckpointManifest Sample() {
  CheckpointManifest m;
  m.shardrec_version = kShardrecVersion;
  m.step = 42;
  m.tables = {Table("a", 10, 4), Table("b", 6, 8)};
  m.optimizer = "adagrad,lr=0.1";
  m.optimizer_iteration = 42;
  m.plan = {{"a", "row_wise"}, {"b", "column_wise"}};
  for (const char* kind : {"weights", "adagrad.sum"}) {
    m.files.push_back(File("a", kind, 0, 5, 0, 4));
    m.files.push_back(File("a", kind, 5, 10, 0, 4));
    m.files.push_back(File("b", kind, 0, 6, 0, 4));
    m.files.push_back(File("b", kind, 0, 6, 4, 8));
  }
  return m;
}

// The sample's JSON with `edit` applied, parsed.
StatusOr<CheckpointManifest> Edited(const std::function<void(json&)>& edit) {
  json doc = json::parse(CheckpointManifestToJson(Sample()));
  edit(doc);
  return ParseCheckpointManifest(doc.dump(), "ckpt/manifest.json");
}

void ExpectRefused(const std::function<void(json&)>& edit, const std::string& says) {
  auto m = Edited(edit);
  ASSERT_FALSE(m.ok()) << "accepted; expected: " << says;
  EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("ckpt/manifest.json"), std::string::npos) << m.status().message();
}

TEST(CheckpointManifest, RoundTripsAndKeepsWhatItDoesNotKnow) {
  CheckpointManifest m = Sample();
  m.extra["reader"] = {{"position", 7}};  // a later issue's entry
  const std::string text = CheckpointManifestToJson(m);
  auto back = ParseCheckpointManifest(text, "m.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->optimizer_iteration, 42);
  EXPECT_EQ(back->tables.size(), 2u);
  ASSERT_EQ(back->files.size(), 8u);
  EXPECT_EQ(back->files[3].col_begin, 4);
  EXPECT_EQ(back->extra["reader"]["position"], 7);
  EXPECT_EQ(CheckpointManifestToJson(back.value()), text);
}

TEST(CheckpointManifest, RefusesWhatALoaderCannotTrust) {
  ExpectRefused([](json& d) { d["format_version"] = 2; }, "format version 2 was written by a newer shardrec");
  ExpectRefused([](json& d) { d["format"] = "torch"; }, "not a shardrec checkpoint manifest");
  ExpectRefused([](json& d) { d["files"].erase(1); }, "the weights files of table 'a' leave rows [5, 10)");
  ExpectRefused([](json& d) { d["files"][1]["rows"] = {4, 10}; }, "shape [5, 4] does not match rows [4, 10)");
  ExpectRefused([](json& d) {
    d["files"][1]["rows"] = {4, 10};
    d["files"][1]["shape"] = {6, 4};
  }, "overlap");
  ExpectRefused([](json& d) { d["files"][0]["path"] = "../../etc/passwd"; }, "not a plain relative path");
  ExpectRefused([](json& d) { d["files"][0]["path"] = "/abs.npy"; }, "not a plain relative path");
  ExpectRefused([](json& d) { d["files"][0]["path"] = d["files"][1]["path"]; }, "is listed twice");
  ExpectRefused([](json& d) { d["files"][0]["kind"] = "momentum"; }, "unknown kind 'momentum'");
  ExpectRefused([](json& d) { d["files"][0]["table"] = "zz"; }, "table 'zz' is not in \"tables\"");
  ExpectRefused([](json& d) { d["files"][0]["dtype"] = "<f8"; }, "dtype <f8 for weights of a fp32 table");
  ExpectRefused([](json& d) { d["files"][0]["rows"] = {0, 11}; }, "rows[1] must be an integer in [0, 10]");
  ExpectRefused([](json& d) { d["files"][0]["xxh3_64"] = "XYZ"; }, "16 lowercase hex digits");
  ExpectRefused([](json& d) { d["optimizer"]["spec"] = "adam"; }, "the adam.m files of table 'a' are missing");
  ExpectRefused([](json& d) { d["optimizer"]["spec"] = "momentum"; }, "optimizer");
  ExpectRefused([](json& d) { d["step"] = -1; }, "step must be an integer");
  ExpectRefused([](json& d) { d["tables"][0]["embedding_dim"] = 0; }, "embedding_dim");
  auto not_json = ParseCheckpointManifest("{", "x.json");
  EXPECT_NE(not_json.status().message().find("x.json: not valid JSON"), std::string::npos);
}

TEST(CheckpointManifest, RowWiseAdagradHasOneColumnPerBlock) {
  CheckpointManifest m = Sample();
  m.optimizer = "rowwise_adagrad";
  for (auto& f : m.files) {
    if (f.kind == "adagrad.sum") {
      f.kind = "rowwise_adagrad.sum";
      f.shape[1] = 1;
    }
  }
  auto back = ParseCheckpointManifest(CheckpointManifestToJson(m), "m.json");
  EXPECT_TRUE(back.ok()) << back.status().ToString();
}

TEST(CheckpointChecksum, IsXxh3AndStreamsLikeTheWholeFile) {
  Xxh3Stream empty;
  EXPECT_EQ(Xxh3Hex(empty.Digest()), "2d06800538d394c2");  // XXH3-64 of no bytes (xxHash's test vector)
  const std::string text = "shardrec checkpoint bytes, hashed in pieces";
  Xxh3Stream pieces;
  pieces.Update(text.data(), 10);
  pieces.Update(text.data() + 10, text.size() - 10);
  const auto path = std::filesystem::temp_directory_path() / ("shardrec_xxh3_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << text;
  int64_t bytes = 0;
  auto whole = Xxh3OfFile(path, &bytes, 7);
  std::filesystem::remove(path);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(whole.value(), pieces.Digest());
  EXPECT_EQ(Xxh3OfFile(path, nullptr).status().code(), SR_NOT_FOUND);
}

}  // namespace
}  // namespace shardrec
