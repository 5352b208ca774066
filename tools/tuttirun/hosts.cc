#include "hosts.h"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tuttirun {

bool parse_hosts(const std::string& spec, int default_nproc, std::vector<HostEntry>* hosts, std::string* error) {
  hosts->clear();
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      *error = "--hosts: empty host name in '" + spec + "'";
      return false;
    }
    HostEntry h;
    std::size_t colon = item.rfind(':');
    if (colon == std::string::npos) {
      h.name = item;
      h.nproc = default_nproc;
      if (h.nproc <= 0) {
        *error = "--hosts: '" + item + "' gives no rank count (write " + item + ":N, or pass -n N)";
        return false;
      }
    } else {
      h.name = item.substr(0, colon);
      std::string n = item.substr(colon + 1);
      char* end = nullptr;
      errno = 0;
      long v = n.empty() ? 0 : std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || errno != 0 || v < 1 || v > (1 << 20)) {
        *error = "--hosts: '" + item + "': the rank count must be a number from 1 to 1048576";
        return false;
      }
      h.nproc = static_cast<int>(v);
    }
    if (h.name.empty()) {
      *error = "--hosts: empty host name in '" + item + "'";
      return false;
    }
    if (!hosts->empty() && h.nproc != hosts->front().nproc) {
      *error = "--hosts: every host must start the same number of ranks ('" + hosts->front().name + ":" +
               std::to_string(hosts->front().nproc) + "' but '" + item + "')";
      return false;
    }
    hosts->push_back(h);
    if (comma == spec.size()) break;
  }
  if (hosts->empty()) {
    *error = "--hosts: no host given";
    return false;
  }
  return true;
}

bool split_words(const std::string& text, std::vector<std::string>* words, std::string* error) {
  words->clear();
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words->push_back(cur);
      cur.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (i + 1 < text.size()) cur += text[++i];
      continue;
    }
    if (c == '\'') {
      std::size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        *error = "unterminated ' in '" + text + "'";
        return false;
      }
      cur.append(text, i + 1, end - i - 1);
      i = end;
      continue;
    }
    if (c == '"') {
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::strchr("\"\\$`", text[j + 1]) != nullptr) ++j;
        cur += text[j];
      }
      if (j >= text.size()) {
        *error = "unterminated \" in '" + text + "'";
        return false;
      }
      i = j;
      continue;
    }
    cur += c;
  }
  if (in_word) words->push_back(cur);
  return true;
}

std::string shell_quote(const std::string& word) {
  bool safe = !word.empty();
  for (char c : word) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::strchr("@%_+=:,./-", c) != nullptr;
    if (!ok) safe = false;
  }
  if (safe) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

HostCommand host_command(const std::vector<std::string>& prefix, const std::string& host,
                         const std::vector<std::string>& command,
                         const std::vector<std::pair<std::string, std::string>>& env) {
  HostCommand hc;
  bool has_cmd = false;
  for (const std::string& p : prefix) {
    if (p == "{cmd}") {
      has_cmd = true;
      std::string line;
      if (!env.empty()) {
        line = "env";
        for (const auto& [name, value] : env) line.append(" ").append(shell_quote(name + "=" + value));
      }
      for (const std::string& w : command) line.append(line.empty() ? "" : " ").append(shell_quote(w));
      hc.argv.push_back(line);
      continue;
    }
    std::string w = p;
    for (std::size_t at = w.find("{host}"); at != std::string::npos; at = w.find("{host}", at + host.size()))
      w.replace(at, 6, host);
    hc.argv.push_back(w);
  }
  if (!has_cmd) hc.argv.insert(hc.argv.end(), command.begin(), command.end());
  hc.env_in_command = has_cmd;
  return hc;
}

std::string random_secret_hex(std::string* error) {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = std::string("getrandom: ") + std::strerror(errno);
      return "";
    }
    got += static_cast<std::size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace tuttirun
