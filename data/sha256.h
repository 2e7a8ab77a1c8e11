// SHA-256 of a byte string, as 64 lowercase hex digits (OpenSSL's libcrypto).
// Identifies the files a tokenizer was built from (tokenizer.h).
//
// Thread safety: pure functions.
#ifndef TRELLIS_DATA_SHA256_H_
#define TRELLIS_DATA_SHA256_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trellis {

std::string Sha256Hex(std::string_view bytes);

// The SHA-256 of a file's contents; NotFound/Unavailable name the file.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace trellis

#endif  // TRELLIS_DATA_SHA256_H_
