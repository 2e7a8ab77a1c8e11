#include "data/sha256.h"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {
namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

DigestContext NewContext() {
  DigestContext context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  TRELLIS_CHECK(context != nullptr &&
                EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1)
      << "OpenSSL EVP_DigestInit_ex(sha256) failed";
  return context;
}

std::string Finish(EVP_MD_CTX* context) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  TRELLIS_CHECK(EVP_DigestFinal_ex(context, digest, &length) == 1)
      << "OpenSSL EVP_DigestFinal_ex failed";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  DigestContext context = NewContext();
  TRELLIS_CHECK(EVP_DigestUpdate(context.get(), bytes.data(), bytes.size()) ==
                1)
      << "OpenSSL EVP_DigestUpdate failed";
  return Finish(context.get());
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  DigestContext context = NewContext();
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    TRELLIS_CHECK(EVP_DigestUpdate(context.get(), buffer.data(),
                                   static_cast<size_t>(in.gcount())) == 1)
        << "OpenSSL EVP_DigestUpdate failed";
  }
  if (in.bad())
    return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return Finish(context.get());
}

}  // namespace trellis
