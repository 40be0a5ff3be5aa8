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

// Writes atomically (a temporary file in the same directory, then rename),
// so a reader never sees half a file and a failed write leaves nothing.
Status WriteNpy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace shardrec
