// NumPy .npy files (format versions 1.0-3.0) for tensors, so inputs and
// outputs can be exchanged with Python: np.save / np.load / torch.from_numpy.
// Little-endian, C-order arrays of int8-64, uint8-64, float16/32/64.
// Everything else (bool — DLPack 0.6 has no bool code —, big-endian, Fortran order,
// object arrays, bfloat16 on
// write — NumPy has none) is refused with a message naming the file.
#pragma once

#include <filesystem>
#include <ostream>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// Reads a whole file. Errors name the path: missing, not an .npy, an
// unsupported dtype, a truncated payload (header size vs file size).
StatusOr<Tensor> ReadNpy(const std::filesystem::path& path);

// Writes `path` atomically: `write` fills a temporary file beside it
// (".tmp.NAME.PID"), which is flushed to disk (fsync) and renamed over
// `path` only when every byte is written, and the directory is synced after
// the rename; a reader, or a machine that loses power, sees the old file or
// the new one, never a torn one. The temporary file is removed on failure,
// and temporary files of NAME left by writers that died (their PID is gone)
// are removed before writing.
Status WriteFileAtomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write,
                           std::ios::openmode mode = std::ios::binary);

// Where an .npy file's array lies, read from its header alone: what a
// reader that streams parts of the array (checkpoints) needs. Checks as
// ReadNpy does (magic, version, header, dtype, C order, a payload at least
// as long as the header says); `descr` is normalised ('<u2', '|u1').
struct NpyLayout {
  DLDataType dtype{};
  std::string descr;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // the payload's first byte
  int64_t payload_bytes = 0;  // what the header says it holds
  int64_t file_bytes = 0;
};
StatusOr<NpyLayout> ReadNpyLayout(const std::filesystem::path& path);

// The bytes before the payload of a format 1.0 .npy holding `descr`
// ("<f4", "<u2", ...: a dtype ReadNpy accepts) in `shape`, padded as NumPy
// pads: for writers that stream the payload themselves.
StatusOr<std::string> NpyPrefix(const std::string& descr, const std::vector<int64_t>& shape);

// Writes atomically (a temporary file in the same directory, then rename),
// so a reader never sees half a file and a failed write leaves nothing.
Status WriteNpy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace shardrec
