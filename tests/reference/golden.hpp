// The shape of the golden tables scripts/golden/*.py write (tests/<module>/golden_<framework>.hpp): each
// case is named, and holds named arrays of doubles (a scalar is an array of one).
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace normkit::golden {

struct golden_case {
    const char* name;
    std::vector<std::pair<const char*, std::vector<double>>> fields;

    bool has(const std::string& key) const {
        for (const auto& field : fields)
            if (key == field.first) return true;
        return false;
    }
    const std::vector<double>& operator[](const std::string& key) const {
        for (const auto& field : fields)
            if (key == field.first) return field.second;
        throw std::out_of_range("golden case " + std::string(name) + " has no field " + key);
    }
    double scalar(const std::string& key) const { return (*this)[key].at(0); }
};

}  // namespace normkit::golden
