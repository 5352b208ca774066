// What every store kind shares: multi_get for stores with no request of their
// own for it (memory and file stores: local, so one get per key costs little).

#include "tutti/store.h"

namespace tutti {

std::vector<Bytes> Store::multi_get(const std::vector<std::string>& keys) {
  wait(keys, timeout());
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(get(k));
  return out;
}

}  // namespace tutti
