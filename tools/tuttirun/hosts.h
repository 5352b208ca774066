// tuttirun --hosts: the pure parts (parsing the host list and the exec
// prefix, building each host's command) and the job secret.
//
//   tuttirun --hosts h0:2,h1:2 [--exec-prefix "ssh -o BatchMode=yes {host} {cmd}"]
//            [--master-addr A] [--master-port P] PROGRAM ARGS...
//
// starts, on each host I through the prefix,
//   tuttirun --nnodes K --node-rank I --master-addr A --master-port P -n N PROGRAM ARGS...
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tuttirun {

struct HostEntry {
  std::string name;
  int nproc = 0;
};

// "h0:2,h1:2" (an entry without ":N" gets default_nproc; 0: required).
// Every host must start the same number of ranks (RANK = node * N + local).
// False and *error on a malformed list.
bool parse_hosts(const std::string& spec, int default_nproc, std::vector<HostEntry>* hosts, std::string* error);

// Splits `text` into words the way a shell does for a simple command:
// blanks separate words, '...' quotes literally, "..." quotes with \" \\ \$
// \` escapes, a backslash outside quotes escapes the next character. No
// expansions. False and *error on an unterminated quote.
bool split_words(const std::string& text, std::vector<std::string>* words, std::string* error);

// One word for a POSIX shell: left bare when it only holds safe characters,
// otherwise in single quotes.
std::string shell_quote(const std::string& word);

// The command line that starts one host's part of the job. Every "{host}" in
// a prefix word becomes the host's name. A word "{cmd}" becomes the command
// as ONE shell-quoted string, preceded by "env NAME=VALUE ..." for `env`
// (for prefixes such as ssh, whose far side runs it through a shell and does
// not inherit our environment); `env_in_command` is then true. Without
// "{cmd}" the command's words are appended unchanged and `env` must be put
// in the environment of the prefix's process instead.
struct HostCommand {
  std::vector<std::string> argv;
  bool env_in_command = false;
};
HostCommand host_command(const std::vector<std::string>& prefix, const std::string& host,
                         const std::vector<std::string>& command,
                         const std::vector<std::pair<std::string, std::string>>& env);

// 32 random bytes from getrandom(2), as 64 hex digits; "" and *error when
// the kernel gives none.
std::string random_secret_hex(std::string* error);

}  // namespace tuttirun
