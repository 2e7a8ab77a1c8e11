// Thin RAII wrappers over the HDF5 C API.
//
// Every HDF5 identifier lives in a move-only handle that closes it when
// destroyed. Every failure comes back as an absl::Status whose message names
// the file, the object path and the operation, followed by the text of
// HDF5's own error stack, e.g.
//   "corpus.h5: /tokens: read of [100, 1125) failed: <why>".
// HDF5's automatic printing of errors to stderr is turned off for every
// thread that goes through these wrappers.
//
// Objects: a File is the root group "/" of an open file; Group and Dataset
// are objects inside it. All three carry attributes (scalar string, int64 and
// double). Groups and datasets keep the file open while they live, so they
// may outlive the File handle they came from.
//
// Element types: a dataset stores one StoredType. Each trellis DType maps to
// one (bf16 is stored as uint16 bits, bit for bit); kU64 has no DType and is
// read into kI64 (or any other integer) memory. Reads and writes convert
// between the stored type and the memory DType the way HDF5 does (integers
// and floats of any width); bf16 memory only pairs with uint16 datasets.
//
// Slices: Read and Write move an N-D hyperslab given by `start` and `count`
// (one entry per dimension) between the dataset and dense row-major memory of
// count's shape.
//
// Thread safety: the system HDF5 is built thread-safe, so calls from several
// threads are serialized inside the library. A single handle is not
// synchronized: don't use one handle from two threads while either mutates it
// (Write, Append, attribute writes, Close).
#ifndef TRELLIS_FRAMEWORK_HDF5_H_
#define TRELLIS_FRAMEWORK_HDF5_H_

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis::hdf5 {

// Owns one HDF5 identifier and closes it with `closer` when destroyed.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { Reset(); }
  Handle(Handle&& other) noexcept;
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes the identifier now; returns the closer's result (negative on
  // failure, 0 when there was nothing to close).
  herr_t Reset();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// A dataspace: the shape of a dataset or attribute and, for I/O, a selection.
class Dataspace {
 public:
  explicit Dataspace(Handle handle) : handle_(std::move(handle)) {}
  // A simple dataspace of `dims`; `max_dims` has the same rank, -1 meaning
  // unlimited. Returns an invalid handle on failure.
  static Dataspace Simple(const Shape& dims, const Shape& max_dims);
  static Dataspace Scalar();
  hid_t id() const { return handle_.id(); }
  bool valid() const { return handle_.valid(); }
  Shape dims() const;
  Shape max_dims() const;  // -1 for an unlimited dimension

 private:
  Handle handle_;
};

// An open attribute; used by Object's attribute helpers.
class Attribute {
 public:
  explicit Attribute(Handle handle) : handle_(std::move(handle)) {}
  hid_t id() const { return handle_.id(); }
  bool valid() const { return handle_.valid(); }

 private:
  Handle handle_;
};

enum class StoredType : uint8_t {
  kF32,
  kF64,
  kF16,
  kI32,
  kI64,
  kU16,
  kU32,
  kU64
};
StoredType StoredTypeOf(DType dtype);
const char* StoredTypeName(StoredType type);

enum class OpenMode : uint8_t { kReadOnly, kReadWrite };

class Group;
class Dataset;

// A file, group or dataset: something with a path and attributes.
class Object {
 public:
  Object(Object&&) noexcept = default;
  Object& operator=(Object&&) noexcept = default;

  // The file name as given when the file was opened or created.
  const std::string& file_name() const { return file_name_; }
  // The absolute path of this object inside the file ("/" for a File).
  const std::string& path() const { return path_; }
  bool valid() const { return handle_.valid(); }
  hid_t id() const { return handle_.id(); }

  bool HasAttribute(const std::string& name) const;
  // Names of this object's attributes, sorted.
  absl::StatusOr<std::vector<std::string>> ListAttributes() const;
  // Writes a scalar attribute, replacing any attribute of that name.
  // Strings are stored as variable-length UTF-8 (h5py reads them as str).
  absl::Status WriteStringAttribute(const std::string& name,
                                    const std::string& value);
  absl::Status WriteInt64Attribute(const std::string& name, int64_t value);
  absl::Status WriteDoubleAttribute(const std::string& name, double value);
  // Reads a scalar (or one-element) attribute. Strings may be fixed or
  // variable length; int64 accepts any integer type; double any number.
  absl::StatusOr<std::string> ReadStringAttribute(
      const std::string& name) const;
  absl::StatusOr<int64_t> ReadInt64Attribute(const std::string& name) const;
  absl::StatusOr<double> ReadDoubleAttribute(const std::string& name) const;

  // "<file>: <path>: <operation> failed: <why>", where <why> is `detail`
  // or, when that is empty, the innermost entry of HDF5's error stack.
  // Clears the stack.
  absl::Status Error(absl::StatusCode code, const std::string& operation,
                     const std::string& detail = "") const;

 protected:
  Object(Handle handle, std::string file_name, std::string path);
  // `relative` resolved against this object's path.
  std::string ChildPath(const std::string& relative) const;

  Handle handle_;
  std::string file_name_;
  std::string path_;

 private:
  absl::StatusOr<Attribute> OpenAttribute(const std::string& name) const;
  absl::Status ReadNumericAttribute(const std::string& name, bool integer,
                                    hid_t memory_type, void* value) const;
  absl::Status WriteScalarAttribute(const std::string& name, hid_t file_type,
                                    hid_t memory_type, const void* value);
};

// A File or a Group: an object that holds links to other objects. Paths are
// relative to this object unless they begin with "/".
class Container : public Object {
 public:
  // Creates the group and any missing groups on its path.
  absl::StatusOr<Group> CreateGroup(const std::string& path);
  absl::StatusOr<Group> OpenGroup(const std::string& path) const;
  absl::StatusOr<Dataset> OpenDataset(const std::string& path) const;
  // Whether every link on `path` exists.
  bool Exists(const std::string& path) const;
  // The names of this group's members, sorted.
  absl::StatusOr<std::vector<std::string>> ListMembers() const;

  // A fixed-shape dataset (contiguous, uninitialized until written).
  absl::StatusOr<Dataset> CreateDataset(const std::string& path,
                                        StoredType type, const Shape& shape);
  absl::StatusOr<Dataset> CreateDataset(const std::string& path, DType dtype,
                                        const Shape& shape);
  // An empty 1-D dataset that grows by Dataset::Append, stored in chunks of
  // `chunk_elements`. REQUIRES: chunk_elements > 0.
  absl::StatusOr<Dataset> CreateExtendableDataset(const std::string& path,
                                                  StoredType type,
                                                  int64_t chunk_elements);

 protected:
  using Object::Object;

 private:
  // chunk_elements > 0 makes a chunked 1-D dataset.
  absl::StatusOr<Dataset> CreateDatasetWith(const std::string& path,
                                            StoredType type, const Shape& dims,
                                            const Shape& max_dims,
                                            int64_t chunk_elements);
};

class File : public Container {
 public:
  // Creates `file_name`, replacing any file there.
  static absl::StatusOr<File> Create(const std::string& file_name);
  // Opens an existing HDF5 file. A missing file is NotFound; a file that is
  // not HDF5 (or is truncated) is InvalidArgument/DataLoss with HDF5's reason.
  static absl::StatusOr<File> Open(const std::string& file_name,
                                   OpenMode mode = OpenMode::kReadOnly);

  // Writes buffered data to disk.
  absl::Status Flush();
  // Flushes and closes, reporting failures (the destructor ignores them).
  // The file stays open in HDF5 while groups or datasets from it live.
  absl::Status Close();

 private:
  using Container::Container;
};

class Group : public Container {
 private:
  friend class Container;
  using Container::Container;
};

class Dataset : public Object {
 public:
  // The shape when opened, updated by this handle's Append.
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // The stored element type; nullopt when it is none of StoredType (strings,
  // int8, compound types, ...).
  std::optional<StoredType> stored_type() const { return stored_type_; }
  // A readable name of the stored type, also for unsupported ones ("int8",
  // "string", "compound").
  const std::string& stored_type_name() const { return stored_type_name_; }
  // Whether the dataset can grow (its first dimension is unlimited).
  bool extendable() const { return extendable_; }

  // Reads the hyperslab [start, start + count) into `out`, which holds
  // NumElements(count) elements of `dtype`.
  absl::Status Read(const Shape& start, const Shape& count, DType dtype,
                    void* out) const;
  // Writes `data` (NumElements(count) elements of `dtype`) to the hyperslab.
  absl::Status Write(const Shape& start, const Shape& count, DType dtype,
                     const void* data);
  // A new CPU tensor of shape `count`.
  absl::StatusOr<Tensor> ReadTensor(const Shape& start, const Shape& count,
                                    DType dtype) const;
  absl::StatusOr<Tensor> ReadAll(DType dtype) const;
  // Writes a CPU tensor to the hyperslab of its shape at `start`.
  // REQUIRES: tensor is defined and on the CPU.
  absl::Status WriteTensor(const Shape& start, const Tensor& tensor);
  // Appends `n` elements of `dtype` to the end of a 1-D extendable dataset.
  absl::Status Append(DType dtype, const void* data, int64_t n);

 private:
  friend class Container;
  Dataset(Handle handle, std::string file_name, std::string path);
  absl::Status Transfer(bool write, const Shape& start, const Shape& count,
                        DType dtype, void* memory) const;

  Shape shape_;
  std::optional<StoredType> stored_type_;
  std::string stored_type_name_;
  bool extendable_ = false;
};

}  // namespace trellis::hdf5

#endif  // TRELLIS_FRAMEWORK_HDF5_H_
