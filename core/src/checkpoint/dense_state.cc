#include "dense_state.h"

#include <algorithm>

#include <fmt/format.h>

#include "file_io.h"
#include "shardrec/core/checkpoint/checksum.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The tensors of parameter i: its value, then its optimizer state by kind
// (before the first step: as the first step would make it).
StatusOr<std::vector<std::pair<std::string, Tensor*>>> TensorsOf(const DenseCheckpointState& state, size_t i,
                                                                 bool with_state) {
  const dense::Parameter& p = *state.params[i];
  std::vector<std::pair<std::string, Tensor*>> out = {{"value", &state.params[i]->value}};
  if (!with_state || state.optimizer == nullptr) return out;
  SR_ASSIGN_OR_RETURN(auto* kinds, state.optimizer->StateFor(i, p.value.shape(), p.name));
  for (const auto& kind : state.optimizer->StateKinds()) out.emplace_back(kind, &kinds->at(kind));
  return out;
}

StatusOr<const json*> DenseEntry(const json& extra, const std::string& source) {
  if (!extra.is_object() || !extra.contains("dense")) {
    return FailedPreconditionError(source + ": holds no dense parameters (saved by a run without --model?)");
  }
  const json& d = extra["dense"];
  if (!d.is_object() || !d.contains("files") || !d["files"].is_array() || !d.contains("optimizer") ||
      !d["optimizer"].is_string() || !d.contains("steps") || !d["steps"].is_number_integer() ||
      d["steps"].get<int64_t>() < 0) {
    return InvalidArgumentError(source + ": \"dense\" must hold \"optimizer\", \"steps\" (>= 0) and a \"files\" list");
  }
  return &d;
}

// The manifest's file entry for (name, kind), checked for form.
StatusOr<const json*> FileEntry(const json& files, const std::string& name, const std::string& kind,
                                const std::string& source) {
  // A field of another type is no match (json::value would throw on it).
  auto text = [](const json& o, const char* key) {
    const auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  for (const json& f : files) {
    if (f.is_object() && text(f, "name") == name && text(f, "kind") == kind) {
      if (!f.contains("path") || !f["path"].is_string() || !f.contains("shape") || !f["shape"].is_array() ||
          !f.contains("bytes") || !f["bytes"].is_number_integer() || !f.contains("xxh3_64") || !f["xxh3_64"].is_string()) {
        return InvalidArgumentError(fmt::format("{}: dense file entry for {} ({}) lacks path, shape, bytes or xxh3_64",
                                                source, name, kind));
      }
      const std::string path = f["path"].get<std::string>();
      if (path.rfind("dense/", 0) != 0 || path.find("..") != std::string::npos || path.find('/', 6) != std::string::npos) {
        return InvalidArgumentError(fmt::format("{}: dense file path '{}' is not dense/NAME", source, path));
      }
      return &f;
    }
  }
  return FailedPreconditionError(fmt::format("{}: no dense {} of parameter '{}' (the model differs from the saved one)",
                                             source, kind, name));
}

}  // namespace

StatusOr<json> SaveDense(const DenseCheckpointState& state, const fs::path& staging, int64_t* bytes) {
  std::error_code ec;
  fs::create_directories(staging / "dense", ec);
  if (ec) return InternalError((staging / "dense").string() + ": cannot create: " + ec.message());
  json files = json::array();
  for (size_t i = 0; i < state.params.size(); ++i) {
    SR_ASSIGN_OR_RETURN(auto tensors, TensorsOf(state, i, true));
    for (const auto& [kind, tensor] : tensors) {
      const std::string path = fmt::format("dense/{}.{}.npy", i, kind);
      SR_ASSIGN_OR_RETURN(NpyStream out, NpyStream::Create(staging / path, "<f4", tensor->shape()));
      SR_RETURN_IF_ERROR(out.Append(tensor->raw_data(), tensor->nbytes()));
      SR_RETURN_IF_ERROR(out.Finish());
      *bytes += out.bytes();
      files.push_back({{"name", state.params[i]->name}, {"kind", kind}, {"path", path}, {"shape", tensor->shape()},
                       {"bytes", out.bytes()}, {"xxh3_64", out.checksum()}});
    }
  }
  json d = {{"files", std::move(files)}, {"steps", 0}, {"optimizer", ""}};
  if (state.optimizer != nullptr) {
    d["optimizer"] = state.optimizer->spec().ToString();
    d["steps"] = state.optimizer->steps();
  }
  return d;
}

Status CheckDense(const DenseCheckpointState& state, const json& extra, const fs::path& dir, bool reset_optimizer,
                  const std::string& source) {
  SR_ASSIGN_OR_RETURN(const json* d, DenseEntry(extra, source));
  const bool with_state = !reset_optimizer && state.optimizer != nullptr;
  if (with_state) {
    SR_ASSIGN_OR_RETURN(auto saved, dense::DenseOptimizerSpec::Parse((*d)["optimizer"].get<std::string>()));
    if (saved.name != state.optimizer->spec().name) {
      return FailedPreconditionError(fmt::format(
          "{}: the checkpoint's dense optimizer is {}, this run's is {}: its state cannot carry over. Use the same "
          "--dense-optimizer, or --reset-optimizer", source, saved.name, state.optimizer->spec().name));
    }
  }
  if ((*d)["files"].size() < state.params.size()) {
    return FailedPreconditionError(fmt::format("{}: holds {} dense files, this model has {} parameters", source,
                                               (*d)["files"].size(), state.params.size()));
  }
  for (size_t i = 0; i < state.params.size(); ++i) {
    SR_ASSIGN_OR_RETURN(auto tensors, TensorsOf(state, i, with_state));
    for (const auto& [kind, tensor] : tensors) {
      SR_ASSIGN_OR_RETURN(const json* f, FileEntry((*d)["files"], state.params[i]->name, kind, source));
      const fs::path path = dir / (*f)["path"].get<std::string>();
      SR_ASSIGN_OR_RETURN(NpyLayout layout, ReadNpyLayout(path));
      if (layout.descr != "<f4" || layout.shape != tensor->shape() || layout.file_bytes != (*f)["bytes"].get<int64_t>()) {
        return FailedPreconditionError(fmt::format("{}: holds {} {} ({} bytes), parameter '{}' ({}) needs <f4 {} ({} bytes "
                                                   "per the manifest)", path.string(), layout.descr,
                                                   ShapeString(layout.shape), layout.file_bytes, state.params[i]->name,
                                                   kind, ShapeString(tensor->shape()), (*f)["bytes"].get<int64_t>()));
      }
      int64_t read = 0;
      SR_ASSIGN_OR_RETURN(uint64_t digest, Xxh3OfFile(path, &read));
      if (Xxh3Hex(digest) != (*f)["xxh3_64"].get<std::string>()) {
        return DataLossError(fmt::format("{}: checksum mismatch (XXH3 {}, the manifest says {}): the file changed after "
                                         "it was saved", path.string(), Xxh3Hex(digest), (*f)["xxh3_64"].get<std::string>()));
      }
    }
  }
  return Status::Ok();
}

Status LoadDense(const DenseCheckpointState& state, const json& extra, const fs::path& dir, bool reset_optimizer) {
  SR_ASSIGN_OR_RETURN(const json* d, DenseEntry(extra, "manifest"));
  const bool with_state = !reset_optimizer && state.optimizer != nullptr;
  for (size_t i = 0; i < state.params.size(); ++i) {
    SR_ASSIGN_OR_RETURN(auto tensors, TensorsOf(state, i, with_state));
    for (const auto& [kind, tensor] : tensors) {
      SR_ASSIGN_OR_RETURN(const json* f, FileEntry((*d)["files"], state.params[i]->name, kind, "manifest"));
      SR_ASSIGN_OR_RETURN(Tensor t, ReadNpy(dir / (*f)["path"].get<std::string>()));
      if (t.shape() != tensor->shape() || !SameDType(t.dtype(), dtype::kFloat32)) {
        return InvalidArgumentError((dir / (*f)["path"].get<std::string>()).string() + ": changed while loading");
      }
      std::copy_n(t.data<float>(), t.numel(), tensor->data<float>());
    }
  }
  if (with_state) state.optimizer->SetSteps((*d)["steps"].get<int64_t>());
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
