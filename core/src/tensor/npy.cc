// .npy reader and writer (see npy.h). The format: magic "\x93NUMPY", a
// version byte pair, a little-endian header length (2 bytes in v1, 4 in
// v2/v3), then a Python dict literal padded with spaces to a 64-byte
// boundary: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
#include "shardrec/core/tensor/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "npy_header.h"
#include "shardrec/core/io/leftovers.h"

namespace shardrec {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

struct DescrType {
  const char* descr;
  DLDataType dtype;
};
// '|' marks single-byte types (no byte order); '<' little-endian.
constexpr DescrType kDescrs[] = {
    {"|i1", {kDLInt, 8, 1}},    {"<i2", {kDLInt, 16, 1}},
    {"<i4", {kDLInt, 32, 1}},   {"<i8", {kDLInt, 64, 1}},   {"|u1", {kDLUInt, 8, 1}},
    {"<u2", {kDLUInt, 16, 1}},  {"<u4", {kDLUInt, 32, 1}},  {"<u8", {kDLUInt, 64, 1}},
    {"<f2", {kDLFloat, 16, 1}}, {"<f4", {kDLFloat, 32, 1}}, {"<f8", {kDLFloat, 64, 1}},
};

Status FileError(const std::filesystem::path& path, const std::string& what) {
  return InvalidArgumentError(path.string() + ": " + what);
}

StatusOr<DLDataType> ParseDescr(const std::filesystem::path& path, const std::string& descr) {
  std::string d = descr;
  if (d.size() == 3 && d[0] == '=') d[0] = '<';  // native order, and we are little-endian
  if (d.size() == 3 && d[0] == '<' && (d[1] == 'i' || d[1] == 'u') && d[2] == '1') {
    d[0] = '|';
  }
  for (const auto& e : kDescrs) {
    if (d == e.descr) return e.dtype;
  }
  if (!descr.empty() && descr[0] == '>') {
    return FileError(path, "big-endian arrays ('" + descr +
                               "') are not supported; save with arr.astype(arr.dtype.newbyteorder('<'))");
  }
  return FileError(path, "unsupported dtype '" + descr +
                             "' (supported: int8-64, uint8-64, float16/32/64)");
}

const char* DescrOf(DLDataType t) {
  for (const auto& e : kDescrs) {
    if (SameDType(e.dtype, t)) return e.descr;
  }
  return nullptr;
}

}  // namespace

StatusOr<NpyLayout> ReadNpyLayout(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    return std::filesystem::exists(path, ec)
               ? FileError(path, "cannot be opened for reading")
               : Status(SR_NOT_FOUND, path.string() + ": no such file");
  }
  char prefix[kMagicSize + 2];
  if (!in.read(prefix, sizeof prefix) || std::memcmp(prefix, kMagic, kMagicSize) != 0) {
    return FileError(path, "not a NumPy .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(prefix[kMagicSize]);
  if (major < 1 || major > 3) {
    return FileError(path, ".npy format version " + std::to_string(major) + " is not supported");
  }
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  const int len_size = major == 1 ? 2 : 4;
  if (!in.read(reinterpret_cast<char*>(len_bytes), len_size)) return FileError(path, "truncated header");
  for (int i = len_size - 1; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > (1u << 20)) return FileError(path, "header of " + std::to_string(header_len) + " bytes is implausible");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return FileError(path, "truncated header");

  auto parsed = npy::ParseHeader(header);
  if (!parsed.ok()) return FileError(path, parsed.status().message());
  NpyLayout layout;
  SR_ASSIGN_OR_RETURN(layout.dtype, ParseDescr(path, parsed->descr));
  layout.descr = DescrOf(layout.dtype);
  if (parsed->fortran_order) {
    return FileError(path, "Fortran-ordered arrays are not supported; save np.ascontiguousarray(arr)");
  }
  layout.shape = parsed->shape;
  // Strides are int64 products of the trailing dims, zero dims or not: a
  // shape whose dims multiply past int64 is refused even with no payload.
  int64_t span = 1;
  for (int64_t e : layout.shape) {
    if (__builtin_mul_overflow(span, std::max<int64_t>(e, 1), &span) || span > (int64_t{1} << 62)) {
      return FileError(path, "shape " + ShapeString(layout.shape) + " is too large");
    }
  }

  // Size the payload before anyone allocates it: a damaged header must give
  // "truncated", not a huge allocation. An overflowing size is truncated too.
  size_t nbytes = DTypeSize(layout.dtype);
  bool overflow = false;
  for (int64_t e : layout.shape) overflow |= __builtin_mul_overflow(nbytes, static_cast<size_t>(e), &nbytes);
  layout.data_offset = static_cast<int64_t>(in.tellg());
  in.seekg(0, std::ios::end);
  layout.file_bytes = static_cast<int64_t>(in.tellg());
  const auto available = static_cast<size_t>(layout.file_bytes - layout.data_offset);
  if (overflow || available < nbytes) {
    return FileError(path, "truncated: header says " + DTypeName(layout.dtype) + " " + ShapeString(layout.shape) +
                               " (" + (overflow ? std::string("more than 2^64") : std::to_string(nbytes)) +
                               " bytes) but only " + std::to_string(available) + " bytes follow");
  }
  layout.payload_bytes = static_cast<int64_t>(nbytes);
  return layout;
}

StatusOr<Tensor> ReadNpy(const std::filesystem::path& path) {
  SR_ASSIGN_OR_RETURN(NpyLayout layout, ReadNpyLayout(path));
  std::ifstream in(path, std::ios::binary);
  Tensor t = Tensor::Empty(layout.dtype, layout.shape);
  in.seekg(layout.data_offset);
  if (t.nbytes() > 0 && !in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()))) {
    return FileError(path, "read error");
  }
  return t;
}

StatusOr<std::string> NpyPrefix(const std::string& descr, const std::vector<int64_t>& shape) {
  bool known = false;
  for (const auto& e : kDescrs) known |= descr == e.descr;
  if (!known) return InvalidArgumentError("cannot write dtype '" + descr + "' to .npy");
  std::string dims = "(";
  for (int64_t e : shape) dims += std::to_string(e) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  else if (shape.size() == 1) dims.resize(dims.size() - 1);  // "(3,)"
  dims += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + dims + ", }";
  // Pad so that magic + version + length + header + '\n' is a multiple of 64.
  const size_t unpadded = kMagicSize + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) return InvalidArgumentError("shape too long for .npy v1");
  const unsigned char version_len[4] = {1, 0, static_cast<unsigned char>(header.size() & 0xFF),
                                        static_cast<unsigned char>(header.size() >> 8)};
  return std::string(kMagic, kMagicSize) + std::string(reinterpret_cast<const char*>(version_len), 4) + header;
}

Status WriteNpy(const std::filesystem::path& path, const Tensor& tensor) {
  const char* descr = DescrOf(tensor.dtype());
  if (descr == nullptr) {
    return InvalidArgumentError(path.string() + ": cannot write dtype " + DTypeName(tensor.dtype()) +
                                " to .npy (NumPy has no such type; convert to float32 first)");
  }
  auto prefix = NpyPrefix(descr, tensor.shape());
  if (!prefix.ok()) return InvalidArgumentError(path.string() + ": " + prefix.status().message());
  return WriteFileAtomically(path, [&](std::ostream& out) {
    out.write(prefix->data(), static_cast<std::streamsize>(prefix->size()));
    out.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
  });
}

namespace {

// fsync of a file or directory by path; false when it cannot be opened or synced.
bool SyncPath(const std::filesystem::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

Status WriteFileAtomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write,
                           std::ios::openmode mode) {
  // ".tmp.NAME.PID" files of writers killed mid-write; a live writer's stay.
  RemoveLeftoversOfDeadProcesses(path.parent_path(), ".tmp." + path.filename().string() + ".");
  const auto tmp = path.parent_path() / (".tmp." + path.filename().string() + "." + std::to_string(::getpid()));
  std::error_code ec;
  {
    std::ofstream out(tmp, mode | std::ios::trunc);
    if (!out) return InvalidArgumentError(path.string() + ": cannot create (is the directory writable?)");
    write(out);
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return InternalError(path.string() + ": write failed (disk full?)");
    }
  }
  if (!SyncPath(tmp, false)) {
    std::filesystem::remove(tmp, ec);
    return InternalError(path.string() + ": fsync failed (disk full or failing?)");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return InternalError(path.string() + ": rename failed: " + why);
  }
  // The rename itself reaches the disk with the directory.
  SyncPath(path.parent_path().empty() ? "." : path.parent_path(), true);
  return Status::Ok();
}

}  // namespace shardrec
