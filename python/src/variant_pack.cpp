// SPDX-License-Identifier: Apache-2.0
// The variant pack from Python. Every object that describes its memory (numpy arrays, torch tensors,
// buffers, DLPack and array-interface objects) is checked against the tensor it is bound to before a
// kernel sees its address: same data type, the same elements in the same layout (or a contiguous
// buffer that covers the tensor), writable and free of overlap where the plan writes it, host memory
// for a pass-by-value scalar. Raw int pointers describe nothing and pass unchecked.
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common.h"
#include "plan/exec_state.h"

namespace opendnn::py {
namespace {

// ---- foreign layouts -------------------------------------------------------------------------

// The head of numpy's array object (PyArrayObject_fields) and of its dtype (PyArray_Descr): these
// leading fields sit at the same offsets in numpy 1.x and 2.x (what PyArray_DATA etc. read).
struct NumpyArray {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NumpyDescr {
  PyObject_HEAD
  PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
};
constexpr int kNpyWriteable = 0x0400;
PyTypeObject* g_ndarray_type = nullptr;

bool is_ndarray(PyTypeObject* tp) {
  if (g_ndarray_type) return tp == g_ndarray_type || PyType_IsSubtype(tp, g_ndarray_type);
  for (PyTypeObject* t = tp; t; t = t->tp_base) {
    if (std::strcmp(t->tp_name, "numpy.ndarray") == 0) {
      Py_INCREF(t);
      g_ndarray_type = t;
      return true;
    }
  }
  return false;
}

// Minimal DLPack structures (the ABI is fixed by the DLPack specification).
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion { uint32_t major, minor; };
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kDLReadOnly = 1;

// Borrows the DLTensor of a DLPack capsule (the capsule keeps ownership); `read_only` from the
// versioned form's flags.
const DLTensor* dltensor_of(nb::handle capsule, bool* read_only = nullptr) {
  PyObject* c = capsule.ptr();
  if (read_only) *read_only = false;
  if (PyCapsule_IsValid(c, "dltensor"))
    return &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"))->dl_tensor;
  if (PyCapsule_IsValid(c, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
    if (read_only) *read_only = (m->flags & kDLReadOnly) != 0;
    return &m->dl_tensor;
  }
  throw nb::type_error("__dlpack__() did not return a DLPack capsule");
}

uintptr_t interface_data(nb::handle iface) {
  nb::object data = nb::borrow(iface)["data"];
  if (data.is_none()) return 0;
  if (nb::isinstance<nb::tuple>(data)) return nb::cast<uintptr_t>(data[0]);
  return nb::cast<uintptr_t>(data);
}

// ---- what an object says about its memory --------------------------------------------------

constexpr int kMaxDims = 32;
constexpr int kHost = 1, kDevice = 2;

struct Described {
  char* data = nullptr;
  int ndim = 0;
  int64_t dims[kMaxDims];
  int64_t strides[kMaxDims];  // in bytes until to_units()
  bool raw = false;           // untyped bytes (bytearray, bytes, a 'B' buffer): only the extent is checked
  bool writable = true;
  int where = kHost;  // kHost, kDevice or both (pinned / managed memory)
  const char* kind = "array";
  char kind_buf[64];  // the kind's text when it comes from Python
};

std::string vec_str(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string vec_str(const std::vector<int64_t>& v) { return vec_str(v.data(), int(v.size())); }

[[noreturn]] void bad(const SlotCheck& c, const std::string& what) {
  throw nb::value_error(("INVALID_VARIANT_PACK: tensor " + c.label + ": " + what).c_str());
}

void set_rank(Described& d, int64_t n, const SlotCheck& c) {
  if (n < 0 || n > kMaxDims) bad(c, "its " + std::string(d.kind) + " has " + std::to_string(n) + " dims (at most 32)");
  d.ndim = int(n);
}

// Python's name for an object's element type, for messages.
std::string dtype_name(nb::handle obj) {
  nb::object dt = nb::getattr(obj, "dtype", nb::none());
  if (!dt.is_none()) return nb::cast<std::string>(nb::str(dt));
  return Py_TYPE(obj.ptr())->tp_name;
}

// The data type an element-type object (numpy dtype, torch dtype) stands for. 4-bit floats are
// storable only packed two to a byte (torch's float4_e2m1fn_x2); ml_dtypes' float4_e2m1fn holds one
// value per byte and matches no tensor data type here.
DataType element_type(nb::handle dtype_obj) {
  std::string name = nb::cast<std::string>(nb::str(dtype_obj));
  if (name.size() >= 13 && name.compare(name.size() - 13, 13, "float4_e2m1fn") == 0) return DataType::NOT_SET;
  try {
    return to_data_type(dtype_obj);
  } catch (const nb::python_error&) {
  } catch (const nb::builtin_exception&) {
  } catch (const nb::cast_error&) {
  }
  return DataType::NOT_SET;
}

// Two floating types of one width (HALF and BFLOAT16, or two FP8 formats): cuDNN Frontend binds such
// memory without a word (its own tests bind float16 tensors to BFLOAT16 graph tensors), so it is
// accepted with a RuntimeWarning that the bits are read as the tensor's type.
bool same_width_floats(DataType want, DataType have) {
  bool half = (want == DataType::HALF || want == DataType::BFLOAT16) && (have == DataType::HALF || have == DataType::BFLOAT16);
  return half || (is_fp8(want) && is_fp8(have));
}

// Whether arrays of `have` may stand for a tensor of `want`: the same type, byte storage (uint8) for
// the 8-bit and 4-bit float types that numpy lacks, or a same-width float (with a warning).
bool type_fits(const SlotCheck& c, DataType want, DataType have) {
  if (have == want) return true;
  if (same_width_floats(want, have)) {
    std::string msg = "opendnn: " + c.label + " is " + std::string(to_string(want)) + " but the array bound to it holds " +
                      std::string(to_string(have)) + " elements; their bits are read as " + std::string(to_string(want));
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw nb::python_error();
    return true;
  }
  if (have != DataType::UINT8) return false;
  return is_fp8(want) || want == DataType::FP4_E2M1;
}

// Checks the element type and remembers `key` (the numpy scalar type, the torch dtype) as matching.
void check_type(SlotCheck& c, nb::handle obj, nb::handle dtype_obj, PyObject* key, PyObject** cache) {
  DataType have = element_type(dtype_obj);
  if (!type_fits(c, c.dtype, have)) {
    std::string got = nb::cast<std::string>(nb::str(dtype_obj));
    bad(c, "it is " + std::string(to_string(c.dtype)) + " but its " + Py_TYPE(obj.ptr())->tp_name + " holds " + got +
               " elements" + (have == DataType::NOT_SET ? " (no opendnn data type)" : ""));
  }
  Py_INCREF(key);  // type objects live for the process; the cache keeps them alive anyway
  *cache = key;
}

// Address, dims, byte strides and writability of a numpy array.
void numpy_memory(const SlotCheck& c, PyObject* o, Described& d) {
  auto* a = reinterpret_cast<NumpyArray*>(o);
  d.kind = "numpy array";
  d.data = a->data;
  set_rank(d, a->nd, c);
  for (int i = 0; i < d.ndim; ++i) {
    d.dims[i] = a->dimensions[i];
    d.strides[i] = a->strides[i];
  }
  d.writable = (a->flags & kNpyWriteable) != 0;
}

void describe_numpy(SlotCheck& c, PyObject* o, Described& d) {
  auto* descr = reinterpret_cast<NumpyDescr*>(reinterpret_cast<NumpyArray*>(o)->descr);
  PyObject* type = reinterpret_cast<PyObject*>(descr->typeobj);
  if (type != c.numpy_type) check_type(c, o, nb::borrow(o).attr("dtype"), type, &c.numpy_type);
  if (descr->byteorder == '>') bad(c, "its numpy array is big-endian");
  numpy_memory(c, o, d);
}

int64_t as_int64(PyObject* v) {
  long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) throw nb::python_error();
  return x;
}

void describe_torch(SlotCheck& c, nb::handle o, nb::handle data_ptr, nb::handle dt, nb::handle shape, Described& d) {
  if (dt.ptr() != c.torch_dtype) check_type(c, o, dt, dt.ptr(), &c.torch_dtype);
  d.kind = "torch tensor";
  d.data = reinterpret_cast<char*>(nb::cast<uintptr_t>(data_ptr()));
  nb::object stride = o.attr("stride")();
  Py_ssize_t n = PySequence_Size(shape.ptr());
  if (n < 0) throw nb::python_error();
  set_rank(d, n, c);
  if (PySequence_Size(stride.ptr()) != n) bad(c, "its torch tensor's stride() does not match its shape");
  const int64_t item = c.bits >= 8 ? c.bits / 8 : 1;
  for (int i = 0; i < d.ndim; ++i) {
    nb::object di = nb::steal(PySequence_GetItem(shape.ptr(), i)), si = nb::steal(PySequence_GetItem(stride.ptr(), i));
    if (!di || !si) throw nb::python_error();
    d.dims[i] = as_int64(di.ptr());
    d.strides[i] = as_int64(si.ptr()) * item;  // torch counts strides in elements
  }
  nb::object cuda = nb::getattr(o, "is_cuda", nb::none());
  d.where = (cuda.is_none() || !PyObject_IsTrue(cuda.ptr())) ? kHost : kDevice;
}

// The buffer protocol (bytearray, bytes, memoryview, array.array...). A 'B'/'c' or untyped buffer
// is raw bytes; a typed one must hold the tensor's type.
void describe_buffer(SlotCheck& c, PyObject* o, Described& d) {
  Py_buffer v;
  if (PyObject_GetBuffer(o, &v, PyBUF_RECORDS_RO) != 0) throw nb::python_error();
  struct Release {
    Py_buffer* v;
    ~Release() { PyBuffer_Release(v); }
  } release{&v};
  d.kind = Py_TYPE(o)->tp_name;
  d.data = static_cast<char*>(v.buf);
  d.writable = !v.readonly;
  const char* f = v.format ? v.format : "B";
  if (*f == '@' || *f == '=' || *f == '<') ++f;
  DataType have = DataType::NOT_SET;
  if (!std::strcmp(f, "B") || !std::strcmp(f, "c")) d.raw = true;
  else if (!std::strcmp(f, "f")) have = DataType::FLOAT;
  else if (!std::strcmp(f, "d")) have = DataType::DOUBLE;
  else if (!std::strcmp(f, "e")) have = DataType::HALF;
  else if (!std::strcmp(f, "b")) have = DataType::INT8;
  else if (!std::strcmp(f, "?")) have = DataType::BOOLEAN;
  else if (!std::strcmp(f, "i") || !std::strcmp(f, "l") || !std::strcmp(f, "q"))
    have = v.itemsize == 4 ? DataType::INT32 : v.itemsize == 8 ? DataType::INT64 : DataType::NOT_SET;
  if (!d.raw && !type_fits(c, c.dtype, have))
    bad(c, "it is " + std::string(to_string(c.dtype)) + " but its " + d.kind + " holds '" + f + "' items");
  set_rank(d, v.ndim, c);
  for (int i = 0; i < d.ndim; ++i) {
    d.dims[i] = v.shape ? v.shape[i] : v.len / std::max<Py_ssize_t>(v.itemsize, 1);
    d.strides[i] = v.strides ? v.strides[i] : v.itemsize;
  }
  if (d.raw && d.ndim == 1 && v.itemsize != 1) d.dims[0] *= v.itemsize;
}

// DLPack and the array interfaces, through opendnn._pygraph._array_facts (rare objects; Python).
void describe_other(SlotCheck& c, nb::handle o, Described& d) {
  // Kept for the process (never released: no reference count to drop after the interpreter ends).
  static nb::handle facts = nb::object(nb::module_::import_("opendnn._pygraph").attr("_array_facts")).release();
  nb::object r = facts(o);
  if (r.is_none())
    throw nb::type_error(("INVALID_VARIANT_PACK: tensor " + c.label + ": cannot take the address of a " +
                          Py_TYPE(o.ptr())->tp_name +
                          ": pass an int pointer, a numpy array, a torch tensor, a buffer or a __dlpack__ object")
                             .c_str());
  // (address, dims, strides in bytes, data_type, writable, where (1 host, 2 device, 3 both), kind)
  d.data = reinterpret_cast<char*>(nb::cast<uintptr_t>(r[0]));
  nb::object dims = r[1], strides = r[2], dt = r[3];
  set_rank(d, int64_t(nb::len(dims)), c);
  for (int i = 0; i < d.ndim; ++i) {
    d.dims[i] = nb::cast<int64_t>(dims[i]);
    d.strides[i] = nb::cast<int64_t>(strides[i]);
  }
  d.writable = nb::cast<bool>(r[4]);
  d.where = nb::cast<int>(r[5]);
  std::string kind = nb::cast<std::string>(r[6]);
  std::snprintf(d.kind_buf, sizeof d.kind_buf, "%s", kind.c_str());
  d.kind = d.kind_buf;
  if (dt.is_none()) {
    d.raw = true;
  } else if (!type_fits(c, c.dtype, nb::cast<DataType>(dt))) {
    bad(c, "it is " + std::string(to_string(c.dtype)) + " but its " + d.kind + " holds " +
               std::string(to_string(nb::cast<DataType>(dt))) + " elements");
  }
}

// ---- the layout ------------------------------------------------------------------------------

struct DimStride {
  int64_t dim, stride;
};

// Sorts the dims other than 1 by stride (insertion sort: a handful of entries).
int sorted_nonunit(const int64_t* dims, const int64_t* strides, int n, DimStride* out) {
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (dims[i] == 1) continue;
    DimStride e{dims[i], strides[i]};
    int j = k++;
    while (j > 0 && out[j - 1].stride > e.stride) {
      out[j] = out[j - 1];
      --j;
    }
    out[j] = e;
  }
  return k;
}

// The number of units the object covers when its elements tile [0, N) exactly, else -1.
int64_t dense_extent(const Described& d) {
  for (int i = 0; i < d.ndim; ++i)
    if (d.dims[i] == 0) return 0;
  DimStride e[kMaxDims];
  int k = sorted_nonunit(d.dims, d.strides, d.ndim, e);
  int64_t expect = 1;
  for (int i = 0; i < k; ++i) {
    if (e[i].stride != expect) return -1;
    if (__builtin_mul_overflow(expect, e[i].dim, &expect)) return -1;
  }
  return expect;
}

// Packed row-major in its own dim order (dims of 1 aside).
bool c_contiguous(const Described& d) {
  int64_t expect = 1;
  for (int i = d.ndim; i-- > 0;) {
    if (d.dims[i] == 1) continue;
    if (d.strides[i] != expect) return false;
    if (__builtin_mul_overflow(expect, d.dims[i], &expect)) return false;
  }
  return true;
}

bool self_overlapping(const Described& d) {
  DimStride e[kMaxDims];
  int k = sorted_nonunit(d.dims, d.strides, d.ndim, e);
  for (int i = 0; i + 1 < k; ++i) {
    int64_t reach;
    if (__builtin_mul_overflow(e[i].stride, e[i].dim, &reach)) return true;
    if (e[i + 1].stride < reach) return true;
  }
  return false;
}

std::string layout_str(const Described& d) {
  return "shape " + vec_str(d.dims, d.ndim) + " strides " + vec_str(d.strides, d.ndim);
}

// Checks the object's memory against the tensor: strides of `d` are in units of `unit` bytes.
void check_layout(const SlotCheck& c, Described& d, int64_t unit) {
  for (int i = 0; i < d.ndim; ++i) {
    if (d.dims[i] < 0) bad(c, "its " + std::string(d.kind) + " has a negative dim");
    if (d.strides[i] % unit != 0)
      bad(c, "its " + std::string(d.kind) + "'s byte strides " + vec_str(d.strides, d.ndim) +
                 " are not multiples of the element size " + std::to_string(unit));
    d.strides[i] /= unit;
  }
  if (c.hi == c.lo) return;  // the tensor has no elements
  int64_t volume = 1;
  for (int i = 0; i < d.ndim; ++i) volume = d.dims[i] == 0 ? 0 : volume;
  if (volume == 0) bad(c, "its " + std::string(d.kind) + " holds no elements");
  if (c.output) {
    for (int i = 0; i < d.ndim; ++i) {
      if (d.dims[i] > 1 && d.strides[i] < 0) bad(c, "it is written but its " + std::string(d.kind) + " has negative strides " + vec_str(d.strides, d.ndim));
      if (d.dims[i] > 1 && d.strides[i] == 0)
        bad(c, "it is written but its " + std::string(d.kind) + " has stride 0 (a broadcast view): " + layout_str(d));
    }
    if (self_overlapping(d)) bad(c, "it is written but its " + std::string(d.kind) + " overlaps itself: " + layout_str(d));
  }
  if (c.ragged) return;  // the extent depends on the ragged offsets' values
  const bool bytes = d.raw || c.bits < 8;
  if (!bytes) {
    DimStride nz[kMaxDims];
    int k = 0;
    for (int i = 0; i < d.ndim; ++i)
      if (d.dims[i] != 1) nz[k++] = {d.dims[i], d.strides[i]};
    bool same_dims = size_t(k) == c.nz_dims.size(), same_strides = same_dims;
    for (int i = 0; same_dims && i < k; ++i) {
      same_dims = nz[i].dim == c.nz_dims[size_t(i)];
      same_strides = same_strides && same_dims && nz[i].stride == c.nz_strides[size_t(i)];
    }
    if (same_strides) return;  // the tensor's own layout (a view of the tensor's layout included)
    // A view with a layout of its own (Fortran order, a transpose, a step slice) read as the tensor's
    // other layout would be read in the wrong order; a C-contiguous array is a plain buffer instead.
    if (same_dims && !c_contiguous(d))
      bad(c, "its dims " + vec_str(c.dims) + " strides " + vec_str(c.strides) + " name other elements than its " +
                 d.kind + "'s " + layout_str(d) + " (strides in elements): bind an array in the tensor's layout "
                 "or give the tensor the array's strides");
  }
  // Otherwise the object is a buffer: its elements must tile its memory, which must hold every element
  // the tensor reaches.
  int64_t have = dense_extent(d);
  if (have < 0)
    bad(c, "its dims " + vec_str(c.dims) + " strides " + vec_str(c.strides) + " do not match its " + d.kind + "'s " +
               layout_str(d) + ", which is not a contiguous buffer either");
  if (bytes) {
    int64_t need = c.lo < 0 ? -1 : (c.hi * c.bits + 7) / 8;
    if (need < 0 || need > have)
      bad(c, "it spans " + std::to_string(need) + " bytes but its " + d.kind + " holds " + std::to_string(have));
  } else if (c.lo < 0 || c.hi > have) {
    bad(c, "it spans " + std::to_string(c.hi * unit) + " bytes (dims " + vec_str(c.dims) + " strides " +
               vec_str(c.strides) + ") but its " + d.kind + " holds " + std::to_string(have * unit));
  }
}

// Host memory for pass-by-value scalars and CPU plans, device memory for GPU plans.
void check_device(const SlotCheck& c, nb::handle v, Described& d) {
  const std::string kind(d.kind);
  if (c.by_value) {
    if (!(d.where & kHost))
      bad(c, "it is a pass-by-value scalar, read from host memory, but its " + kind + " is in device memory");
  } else if (c.on_device) {
    if (d.where == kHost && nb::hasattr(v, "is_pinned") && PyObject_IsTrue(v.attr("is_pinned")().ptr())) return;
    if (!(d.where & kDevice))
      bad(c, "the plan runs on the GPU but its " + kind + " is in host memory (move it to the device)");
  } else if (!(d.where & kHost)) {
    bad(c, "the plan runs on the CPU but its " + kind + " is in device memory");
  }
}

// The checked address of `v` for slot `c`.
void* checked_pointer(SlotCheck& c, nb::handle v) {
  PyObject* o = v.ptr();
  if (PyLong_Check(o)) {
    if (PyBool_Check(o)) bad(c, "a bool is not a pointer");
    unsigned long long p = PyLong_AsUnsignedLongLong(o);
    if (p == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      bad(c, "the int pointer " + nb::cast<std::string>(nb::str(v)) + " is not an address");
    }
    return reinterpret_cast<void*>(uintptr_t(p));
  }
  Described d;
  if (is_ndarray(Py_TYPE(o))) {
    describe_numpy(c, o, d);
  } else if (nb::object dp = nb::getattr(v, "data_ptr", nb::none()); !dp.is_none()) {
    nb::object dt = nb::getattr(v, "dtype", nb::none());
    nb::object shape = dt.is_none() ? nb::none() : nb::getattr(v, "shape", nb::none());
    if (shape.is_none())  // data_ptr() alone describes nothing: unchecked, as an int
      return reinterpret_cast<void*>(nb::cast<uintptr_t>(dp()));
    describe_torch(c, v, dp, dt, shape, d);
  } else if (PyObject_CheckBuffer(o)) {
    describe_buffer(c, o, d);
  } else {
    describe_other(c, v, d);
  }
  if (c.output && !d.writable) bad(c, "it is written but its " + std::string(d.kind) + " is read-only");
  check_device(c, v, d);
  const int64_t unit = (d.raw || c.bits < 8) ? 1 : c.bits / 8;
  check_layout(c, d, unit);
  return d.data;
}

}  // namespace

// ---- slot checks -------------------------------------------------------------------------------

namespace {

// Extents beyond this are out of reach of any object (and their byte counts cannot overflow).
constexpr int64_t kHuge = int64_t(1) << 56;

void build_checks(PyGraph& g) {
  const std::vector<int64_t>& uids = g.variant_uids();
  const bool on_device = g.exec_state() && g.exec_state()->target.kind != DeviceKind::CPU;
  g.slot_uids = uids;
  g.checks.assign(uids.size(), SlotCheck{});
  for (size_t i = 0; i < uids.size(); ++i) {
    SlotCheck& c = g.checks[i];
    c.uid = uids[i];
    c.on_device = on_device;
    c.label = "uid " + std::to_string(c.uid);
    TensorPtr t = g.find_tensor(c.uid);
    if (!t) continue;
    if (!t->get_name().empty()) c.label = "\"" + t->get_name() + "\" (" + c.label + ")";
    c.dtype = t->get_data_type();
    c.bits = bits_of(c.dtype);
    c.dims = t->get_dim();
    c.strides = t->get_stride();
    if (c.strides.size() != c.dims.size()) c.strides = row_major_strides(c.dims);
    bool empty = false;
    int64_t lo = 0, hi = 0;
    for (size_t k = 0; k < c.dims.size(); ++k) {
      if (c.dims[k] != 1) {
        c.nz_dims.push_back(c.dims[k]);
        c.nz_strides.push_back(c.strides[k]);
      }
      if (c.dims[k] <= 0) empty = true;
      int64_t reach = 0;
      if (!empty && __builtin_mul_overflow(c.dims[k] - 1, c.strides[k], &reach)) reach = kHuge;
      int64_t& end = reach < 0 ? lo : hi;
      if (__builtin_add_overflow(end, reach, &end)) end = reach < 0 ? -kHuge : kHuge;
    }
    c.lo = empty ? 0 : std::max(lo, -kHuge);
    c.hi = empty ? 0 : std::min(hi, kHuge) + 1;
    c.output = t->is_produced();
    c.by_value = t->get_is_pass_by_value();
    c.ragged = t->get_ragged_offset() != nullptr;
    auto it = g.host_defaults.find(t.get());
    if (it != g.host_defaults.end()) c.host_default = it->second.data();
  }
}

int64_t key_uid(nb::handle k) {
  TensorAttr* t = nullptr;
  if (nb::try_cast<TensorAttr*>(k, t, false) && t) {
    if (!t->has_uid())
      throw nb::value_error(("INVALID_VARIANT_PACK: tensor \"" + t->get_name() +
                             "\" has no uid yet (call validate() or build first)")
                                .c_str());
    return t->get_uid();
  }
  if (PyLong_Check(k.ptr()) && !PyBool_Check(k.ptr())) return nb::cast<int64_t>(k);
  throw nb::value_error(("INVALID_VARIANT_PACK: variant pack keys must be graph tensors or int uids, not " +
                         std::string(Py_TYPE(k.ptr())->tp_name))
                            .c_str());
}

}  // namespace

void refresh_checks(PyGraph& g) { build_checks(g); }

void invalidate_checks(PyGraph& g) {
  g.slot_uids.clear();
  g.checks.clear();
}

void resolve_pack(PyGraph& g, nb::handle pack, void** slots) {
  if (!PyDict_Check(pack.ptr())) throw nb::type_error("tensor_to_device_buffer must be a dict {tensor or uid: buffer}");
  const std::vector<int64_t>& uids = g.variant_uids();
  if (g.checks.size() != uids.size() || !std::equal(uids.begin(), uids.end(), g.slot_uids.begin())) build_checks(g);
  const size_t n = uids.size();
  std::fill(slots, slots + n, nullptr);
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(pack.ptr(), &pos, &k, &v)) {
    if (k == Py_None) continue;
    int64_t uid = key_uid(k);
    // Slots are ascending uids: a short scan beats hashing for the usual handful of tensors.
    size_t i;
    if (n <= 16) {
      i = 0;
      while (i < n && uids[i] != uid) ++i;
    } else {
      i = size_t(std::lower_bound(uids.begin(), uids.end(), uid) - uids.begin());
      if (i < n && uids[i] != uid) i = n;
    }
    if (i == n) continue;  // the plan needs no memory for it (virtual, a constant, or not in this graph)
    SlotCheck& c = g.checks[i];
    if (v == Py_None) bad(c, "its value is None");
    void* p = checked_pointer(c, v);
    if (!p) bad(c, "its address is null");
    slots[i] = p;
  }
  for (size_t i = 0; i < n; ++i) {
    if (slots[i]) continue;
    if (g.checks[i].host_default) {
      slots[i] = const_cast<void*>(g.checks[i].host_default);
      continue;
    }
    bad(g.checks[i], "the variant pack has no entry for it");
  }
}

void* resolve_workspace(nb::handle ws, int64_t need) {
  if (ws.is_none()) return nullptr;
  SlotCheck c;
  c.label = "workspace";
  c.dtype = DataType::UINT8;
  c.bits = 8;
  c.output = true;
  PyObject* o = ws.ptr();
  if (PyLong_Check(o)) return checked_pointer(c, ws);
  Described d;
  // Any element type will do: the workspace is counted in bytes.
  if (is_ndarray(Py_TYPE(o))) {
    numpy_memory(c, o, d);
    nb::object item = nb::borrow(o).attr("itemsize");
    int64_t isz = nb::cast<int64_t>(item);
    for (int i = 0; i < d.ndim; ++i) d.strides[i] = d.strides[i] / std::max<int64_t>(isz, 1);
    int64_t have = dense_extent(d);
    if (have < 0) throw nb::value_error("INVALID_VARIANT_PACK: the workspace array is not contiguous");
    if (!d.writable) throw nb::value_error("INVALID_VARIANT_PACK: the workspace array is read-only");
    if (have * isz < need)
      throw nb::value_error(("INVALID_VARIANT_PACK: the workspace holds " + std::to_string(have * isz) +
                             " bytes but the plan needs " + std::to_string(need))
                                .c_str());
    return d.data;
  }
  nb::object nbytes = nb::getattr(ws, "nbytes", nb::none());
  void* p = to_pointer(ws);
  int64_t have = -1;
  if (!nbytes.is_none() && PyLong_Check(nbytes.ptr())) {
    have = nb::cast<int64_t>(nbytes);
  } else if (PyObject_CheckBuffer(o)) {
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_WRITABLE) != 0) {
      PyErr_Clear();
      throw nb::value_error("INVALID_VARIANT_PACK: the workspace buffer is read-only");
    }
    have = v.len;
    PyBuffer_Release(&v);
  } else if (nb::object n = nb::getattr(ws, "numel", nb::none()); !n.is_none()) {
    have = nb::cast<int64_t>(n()) * nb::cast<int64_t>(ws.attr("element_size")());
  }
  if (have >= 0 && have < need)
    throw nb::value_error(("INVALID_VARIANT_PACK: the workspace holds " + std::to_string(have) +
                           " bytes but the plan needs " + std::to_string(need))
                              .c_str());
  return p;
}

// ---- plain addresses ---------------------------------------------------------------------------

void* to_pointer(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyLong_Check(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) throw nb::python_error();
    return reinterpret_cast<void*>(uintptr_t(v));
  }
  PyTypeObject* tp = Py_TYPE(o);
  if (is_ndarray(tp)) return reinterpret_cast<NumpyArray*>(o)->data;
  nb::object f = nb::getattr(h, "data_ptr", nb::none());  // torch tensors
  if (!f.is_none()) return reinterpret_cast<void*>(nb::cast<uintptr_t>(f()));
  nb::object iface = nb::getattr(h, "__cuda_array_interface__", nb::none());
  if (!iface.is_none()) return reinterpret_cast<void*>(interface_data(iface));
  iface = nb::getattr(h, "__array_interface__", nb::none());
  if (!iface.is_none()) return reinterpret_cast<void*>(interface_data(iface));
  nb::object dl = nb::getattr(h, "__dlpack__", nb::none());
  if (!dl.is_none()) {
    nb::object cap = dl();
    const DLTensor* t = dltensor_of(cap);
    return static_cast<char*>(t->data) + t->byte_offset;
  }
  if (PyObject_CheckBuffer(o)) {
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_STRIDES) != 0) throw nb::python_error();
    void* p = view.buf;
    PyBuffer_Release(&view);
    return p;
  }
  throw nb::type_error(("cannot take the address of a " + std::string(tp->tp_name) +
                        ": pass an int pointer, a numpy array, a torch tensor or a __dlpack__ object")
                           .c_str());
}

nb::dict dlpack_info(nb::handle obj) {
  // The versioned form first: it says whether the memory is read-only.
  nb::object export_ = nb::getattr(obj, "__dlpack__"), cap;
  try {
    cap = export_(nb::arg("max_version") = nb::make_tuple(1, 0));
  } catch (const nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    cap = export_();
  }
  bool read_only = false;
  const DLTensor* t = dltensor_of(cap, &read_only);
  nb::list shape, strides;
  for (int i = 0; i < t->ndim; ++i) shape.append(t->shape[i]);
  if (t->strides) {
    for (int i = 0; i < t->ndim; ++i) strides.append(t->strides[i]);
  } else {
    int64_t s = 1;
    std::vector<int64_t> st(size_t(t->ndim));
    for (int i = t->ndim; i-- > 0;) {
      st[size_t(i)] = s;
      s *= t->shape[i];
    }
    for (auto v : st) strides.append(v);
  }
  nb::dict d;
  d["shape"] = shape;
  d["strides"] = strides;
  d["code"] = int(t->dtype.code);
  d["bits"] = int(t->dtype.bits);
  d["lanes"] = int(t->dtype.lanes);
  d["device_type"] = int(t->device.device_type);
  d["device_id"] = int(t->device.device_id);
  d["data"] = uintptr_t(static_cast<char*>(t->data) + t->byte_offset);
  d["read_only"] = read_only;
  return d;
}

}  // namespace opendnn::py
