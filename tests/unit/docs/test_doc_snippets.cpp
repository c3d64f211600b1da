// The code the docs show is the code the suite builds: every `<!-- snippet: FILE TAG -->` in
// docs/*.md is followed by a fenced block equal (after removing common indentation) to the
// lines of FILE between its two `// [TAG]` marker lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "pipesched/policy/registry.hpp"

namespace test_doc_snippets {

namespace {

namespace fs = std::filesystem;

const fs::path source_dir = fs::path(PIPESCHED_TEST_DATA_DIR).parent_path().parent_path();

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

// `lines` without their common leading spaces and without trailing blank lines.
std::vector<std::string> dedent(std::vector<std::string> lines) {
  std::size_t common = std::string::npos;
  for (const std::string& l : lines)
    if (l.find_first_not_of(' ') != std::string::npos)
      common = std::min(common, l.find_first_not_of(' '));
  for (std::string& l : lines)
    l = l.size() >= common ? l.substr(common) : std::string();
  while (!lines.empty() && lines.back().empty())
    lines.pop_back();
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines)
    s += l + "\n";
  return s;
}

// The lines of `file` between its `// [tag]` markers; empty when there are not two.
std::vector<std::string> marked(const fs::path& file, const std::string& tag) {
  const std::vector<std::string> all = lines_of(file);
  const std::string marker = "// [" + tag + "]";
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].find_first_not_of(' ') != std::string::npos &&
        all[i].substr(all[i].find_first_not_of(' ')) == marker)
      at.push_back(i);
  if (at.size() != 2) return {};
  return {all.begin() + static_cast<std::ptrdiff_t>(at[0] + 1),
          all.begin() + static_cast<std::ptrdiff_t>(at[1])};
}

TEST(DocSnippets, EverySnippetIsTheTestedCode) {
  const std::regex snippet(R"(<!-- snippet: (\S+) (\S+) -->)");
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(source_dir / "docs")) {
    if (entry.path().extension() != ".md") continue;
    const std::vector<std::string> doc = lines_of(entry.path());
    for (std::size_t i = 0; i < doc.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(doc[i], m, snippet)) continue;
      SCOPED_TRACE(entry.path().filename().string() + ":" + std::to_string(i + 1));
      const std::vector<std::string> code = marked(source_dir / m[1].str(), m[2].str());
      ASSERT_FALSE(code.empty()) << m[1] << " has no pair of // [" << m[2] << "] markers";
      ASSERT_LT(i + 1, doc.size());
      ASSERT_EQ(doc[i + 1].rfind("```", 0), 0u) << "no code block after the snippet marker";
      std::vector<std::string> shown;
      std::size_t j = i + 2;
      for (; j < doc.size() && doc[j].rfind("```", 0) != 0; ++j)
        shown.push_back(doc[j]);
      ASSERT_LT(j, doc.size()) << "unterminated code block";
      EXPECT_EQ(joined(dedent(shown)), joined(dedent(code)))
          << "the block differs from " << m[1] << "; run scripts/sync-doc-snippets.py";
      ++checked;
    }
  }
  // docs/custom_schedules.md shows three pieces of example 03 and two of example 04.
  EXPECT_GE(checked, 5);
}

}  // namespace

namespace {

// The README's first paragraph names every built-in order by its command-line name, and says
// how many there are: the list is the registry's, not a copy that drifts.
TEST(DocLists, ReadmeNamesEveryOrder) {
  std::string intro;
  for (const std::string& line : lines_of(source_dir / "README.md")) {
    if (line.rfind("**", 0) == 0 || !intro.empty()) {
      if (line.empty()) break;
      intro += line + " ";
    }
  }
  ASSERT_FALSE(intro.empty());
  const auto orders = pipesched::builtin_generators();
  for (const pipesched::GeneratorInfo& g : orders)
    EXPECT_NE(intro.find("`" + std::string(g.name) + "`"), std::string::npos)
        << "README's first paragraph does not name " << g.name;
  const char* counts[] = {"zero",   "one",    "two",     "three",    "four",    "five",
                          "six",    "seven",  "eight",   "nine",     "ten",     "eleven",
                          "twelve", "thirteen", "fourteen", "fifteen", "sixteen"};
  ASSERT_LT(orders.size(), std::size(counts));
  EXPECT_NE(intro.find(std::string(counts[orders.size()]) + " schedule orders"), std::string::npos)
      << "README's first paragraph should say " << counts[orders.size()] << " schedule orders";
}

// Whether a path a doc names exists: from the project root, from include/ or include/pipesched/ (a header as
// `#include` spells it), or from the doc's own folder.
bool names_a_file(const fs::path& doc, const std::string& path) {
  for (const fs::path& base : {source_dir, source_dir / "include", source_dir / "include" / "pipesched",
                               doc.parent_path()})
    if (fs::exists(base / path)) return true;
  return false;
}

// Every file a doc links to or names in code quotes exists (paths with a folder, or a .md
// file); line numbers after a colon (`tools/cli.cpp:120`) are dropped.
TEST(DocLinks, EveryFileADocNamesExists) {
  const std::regex link(R"(\]\(([^)#:\s]+)(#[^)]*)?\))");
  const std::regex quoted(
      R"(`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.(?:md|hpp|cpp|cuh|cu|sh|txt|json|csv))(?::[0-9-]+)?`)");
  const std::regex mentioned(R"(\b(docs/[a-z_]+\.md)\b)");
  std::vector<fs::path> docs{source_dir / "README.md"};
  for (const auto& entry : fs::directory_iterator(source_dir / "docs"))
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  int checked = 0;
  for (const fs::path& doc : docs) {
    const std::vector<std::string> lines = lines_of(doc);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      for (const std::regex* re : {&link, &quoted, &mentioned}) {
        for (auto it = std::sregex_iterator(lines[i].begin(), lines[i].end(), *re);
             it != std::sregex_iterator(); ++it) {
          const std::string path = (*it)[1].str();
          if (path.starts_with("http")) continue;
          const std::string first = path.substr(0, path.find('/'));
          if (path.find('/') != std::string::npos &&
              std::all_of(first.begin(), first.end(), [](char c) { return std::isupper(c); }))
            continue;  // a placeholder folder (DIR/report.txt)
          if (re == &quoted && path.find('/') == std::string::npos && !path.ends_with(".md"))
            continue;  // a bare file name (plan.json) is an example, not a link
          ++checked;
          EXPECT_TRUE(names_a_file(doc, path))
              << doc.filename().string() << ":" << i + 1 << " names '" << path
              << "', which does not exist";
        }
      }
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace

}  // namespace test_doc_snippets
