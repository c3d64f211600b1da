// The pipesched command's observable behaviour, case by case: tests/data/cli_corpus/corpus.txt
// lists invocations (every subcommand and schedule, good and bad input); expected/NAME.txt
// holds what each printed (exit code, standard output, standard error, files written). A
// change that alters any of them shows here as a difference to review; after a deliberate
// change, PIPESCHED_RECORD_CLI_CORPUS=1 rewrites the expected files.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace test_cli_corpus {

namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name, args;
};

// gtest names a failing case by this, not by its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

const fs::path corpus_dir = fs::path(PIPESCHED_TEST_DATA_DIR) / "cli_corpus";

std::vector<Case> load_corpus() {
  std::vector<Case> cases;
  std::ifstream in(corpus_dir / "corpus.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    Case c{line.substr(0, colon), line.substr(colon + 1)};
    if (!c.args.empty() && c.args[0] == ' ') c.args.erase(0, 1);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// What varies from run to run: the folders, and the tuner's wall-clock time.
std::string normalized(std::string text, const std::string& tmp) {
  replace_all(text, tmp, "$TMP");
  replace_all(text, PIPESCHED_TEST_DATA_DIR, "$DATA");
  static const std::regex seconds_text(R"(in [0-9]+\.[0-9]+ s on)");
  static const std::regex seconds_json(R"("seconds":[0-9.eE+-]+)");
  text = std::regex_replace(text, seconds_text, "in ~ s on");
  text = std::regex_replace(text, seconds_json, "\"seconds\":~");
  return text;
}

// A large file as its size and a hash; a small one as it is.
std::string file_record(const std::string& content) {
  if (content.size() <= 16384) return content;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : content)
    h = (h ^ ch) * 1099511628211ull;
  std::ostringstream os;
  os << content.size() << " bytes, FNV-1a " << std::hex << h << "\n";
  return os.str();
}

std::string run_case(const Case& c) {
  const fs::path tmp =
      fs::temp_directory_path() / ("pipesched_corpus_" + std::to_string(::getpid()) + "_" + c.name);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string args = c.args;
  replace_all(args, "$DATA", PIPESCHED_TEST_DATA_DIR);
  replace_all(args, "$TMP", tmp.string());
  const fs::path out = tmp / ".stdout", err = tmp / ".stderr";
  const std::string cmd = std::string("cd '") + tmp.string() + "' && '" + PIPESCHED_CLI_PATH +
                          "' " + args + " >'" + out.string() + "' 2>'" + err.string() +
                          "' </dev/null";
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ostringstream record;
  record << "$ pipesched " << c.args << "\nexit " << code << "\n--- stdout\n"
         << slurp(out) << "--- stderr\n"
         << slurp(err);
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(tmp))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    record << "--- file " << fs::relative(f, tmp).string() << "\n" << file_record(slurp(f));
  fs::remove_all(tmp);
  return normalized(record.str(), tmp.string());
}

class CliCorpus : public ::testing::TestWithParam<Case> {};

TEST_P(CliCorpus, PrintsWhatItPrinted) {
  const Case& c = GetParam();
  const std::string got = run_case(c);
  const fs::path expected_file = corpus_dir / "expected" / (c.name + ".txt");
  if (const char* record = std::getenv("PIPESCHED_RECORD_CLI_CORPUS"); record && *record == '1') {
    fs::create_directories(expected_file.parent_path());
    std::ofstream(expected_file, std::ios::binary) << got;
    return;
  }
  ASSERT_TRUE(fs::exists(expected_file))
      << expected_file << " is missing; PIPESCHED_RECORD_CLI_CORPUS=1 records it";
  EXPECT_EQ(got, slurp(expected_file)) << "pipesched " << c.args;
}

TEST(CliCorpusFiles, EveryExpectedFileHasItsCase) {
  const auto cases = load_corpus();
  ASSERT_GT(cases.size(), 100u);
  for (const auto& e : fs::directory_iterator(corpus_dir / "expected")) {
    const std::string stem = e.path().stem().string();
    EXPECT_TRUE(
        std::any_of(cases.begin(), cases.end(), [&](const Case& c) { return c.name == stem; }))
        << e.path() << " belongs to no case of corpus.txt";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CliCorpus, ::testing::ValuesIn(load_corpus()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string n = param.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace

}  // namespace test_cli_corpus
