// Turns every ```cpp block of README.md into a function of one program, so
// that the README's code is compiled (with the tests' -Wall -Wextra -Werror)
// and run by ctest. A block's #include lines go to the top of the file, the
// rest becomes the body of readme_snippet_N(); #line directives point compile
// errors at README.md's own lines. The program runs the snippets in order and
// fails on any exception (a normkit::error names the bad argument).
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct snippet {
    std::size_t first_line = 0;  // README line of the block's first code line
    std::vector<std::string> body;
};

std::string quoted(const std::string& path) {
    std::string result = "\"";
    for (char c : path) result += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return result + "\"";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: extract_snippets README.md snippets.cpp\n";
        return 2;
    }
    std::ifstream readme(argv[1]);
    if (!readme) {
        std::cerr << "extract_snippets: cannot read " << argv[1] << "\n";
        return 2;
    }
    std::vector<std::string> includes;
    std::set<std::string> seen;
    std::vector<snippet> snippets;
    bool inside = false;
    std::string line;
    for (std::size_t number = 1; std::getline(readme, line); ++number) {
        if (!inside && line == "```cpp") {
            inside = true;
            snippets.push_back({number + 1, {}});
        } else if (inside && line.rfind("```", 0) == 0) {
            inside = false;
        } else if (inside && line.rfind("#include", 0) == 0) {
            if (seen.insert(line).second) includes.push_back(line);
            snippets.back().body.push_back("");  // keeps the #line numbering exact
        } else if (inside) {
            snippets.back().body.push_back(line);
        }
    }
    if (inside) {
        std::cerr << "extract_snippets: an unterminated ```cpp block in " << argv[1] << "\n";
        return 1;
    }
    if (snippets.empty()) {
        std::cerr << "extract_snippets: no ```cpp block in " << argv[1] << "\n";
        return 1;
    }
    std::ostringstream out;
    out << "// Generated from " << argv[1] << " by extract_snippets: do not edit.\n";
    for (const auto& include : includes) out << include << "\n";
    out << "#include <exception>\n#include <iostream>\n\n";
    for (std::size_t k = 0; k < snippets.size(); ++k) {
        out << "static void readme_snippet_" << k + 1 << "() {\n";
        out << "#line " << snippets[k].first_line << " " << quoted(argv[1]) << "\n";
        for (const auto& body_line : snippets[k].body) out << body_line << "\n";
        out << "}\n\n";
    }
    out << "int main() {\n";
    for (std::size_t k = 0; k < snippets.size(); ++k) {
        out << "    try {\n        readme_snippet_" << k + 1 << "();\n        std::cout << \"README snippet " << k + 1
            << " (line " << snippets[k].first_line
            << "): ok\\n\";\n    } catch (const std::exception& failure) {\n        std::cerr << \"README snippet "
            << k + 1 << " (line " << snippets[k].first_line
            << ") threw: \" << failure.what() << \"\\n\";\n        return 1;\n    }\n";
    }
    out << "    return 0;\n}\n";
    // Written only when changed, so an edit of the README's prose rebuilds nothing.
    std::ifstream existing(argv[2]);
    std::stringstream previous;
    previous << existing.rdbuf();
    if (existing && previous.str() == out.str()) return 0;
    std::ofstream(argv[2]) << out.str();
    return 0;
}
