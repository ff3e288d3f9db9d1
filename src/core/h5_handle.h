// H5Handle: RAII owner of one HDF5 identifier (file, group, dataset, dataspace, type, plist, attr).
// Closes with the right H5*close for the id's type. Every HDF5 call is wrapped in WMTP_H5_CHECK.
#pragma once
#include <hdf5.h>

#include <utility>

namespace wmtp {

class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}
  ~H5Handle() { reset(); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) reset(), id_ = std::exchange(o.id_, H5I_INVALID_HID);
    return *this;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ < 0) return;
    switch (H5Iget_type(id_)) {
      case H5I_FILE: H5Fclose(id_); break;
      case H5I_GROUP: H5Gclose(id_); break;
      case H5I_DATASET: H5Dclose(id_); break;
      case H5I_DATASPACE: H5Sclose(id_); break;
      case H5I_DATATYPE: H5Tclose(id_); break;
      case H5I_ATTR: H5Aclose(id_); break;
      case H5I_GENPROP_LST: H5Pclose(id_); break;
      default: break;
    }
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Stop HDF5 printing its error stack to stderr: WMTP_H5_CHECK collects it into the exception.
inline void h5_silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace wmtp
