// The benchmark binary's main: Google Benchmark's, with the host in the report's context, so
// that every table says where it was measured (scripts/lib/summarize.py prints these):
//   cpu_model    /proc/cpuinfo's "model name"
//   isa          the instruction set xsimd compiled for (-march), and the float lanes per batch
//   caches       L1d / L2 / L3 of one core, from sysfs (else the C library)
//   tuning       the rows of core/tuning.hpp this binary and host take
#include <benchmark/benchmark.h>
#include <normkit/core/tuning.hpp>
#include <xsimd/xsimd.hpp>

#include <fstream>
#include <string>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace {

std::string cpu_model() {
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

// Linux's sysfs first: glibc's sysconf reports an AMD host's L3 as the whole package's times the
// threads sharing it under some hypervisors (320 MiB for a 32 MiB L3 seen on a Zen 4 VM).
std::string sysfs_cache(int level) {
    for (int index = 0; index < 8; ++index) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
        std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
        int found = 0;
        std::string type, size;
        if (!(level_file >> found) || !(type_file >> type) || !(size_file >> size)) continue;
        if (found == level && type != "Instruction")
            return size.back() == 'K' ? size.substr(0, size.size() - 1) + " KiB" : size;
    }
    return {};
}

std::string caches() {
    std::string levels[3] = {sysfs_cache(1), sysfs_cache(2), sysfs_cache(3)};
#if defined(__linux__) && defined(_SC_LEVEL1_DCACHE_SIZE)
    const int names[3] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE};
    for (int level = 0; level < 3; ++level)
        if (levels[level].empty()) levels[level] = std::to_string(sysconf(names[level]) / 1024) + " KiB";
#endif
    for (auto& level : levels)
        if (level.empty()) level = "unknown";
    return "L1d " + levels[0] + ", L2 " + levels[1] + ", L3 " + levels[2];
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::AddCustomContext("cpu_model", cpu_model());
    benchmark::AddCustomContext("isa", std::string(xsimd::default_arch::name()) + ", " +
                                           std::to_string(xsimd::batch<float>::size) + " float lanes");
    benchmark::AddCustomContext("caches", caches());
    namespace tuning = normkit::core::tuning;
    const char* isa_row[] = {"avx512", "avx2", "sse2"};
    const char* vendor[] = {"intel", "amd", "other"};
    benchmark::AddCustomContext(
        "tuning", std::string(isa_row[static_cast<int>(tuning::target)]) + " row, " +
                      vendor[static_cast<int>(tuning::host_vendor())] +
                      " host (DyT / Derf stream: " + (tuning::host().stream_pointwise ? "yes" : "no") +
                      ", short LayerNorm rows paired: " + (tuning::host().pair_short_rows ? "yes" : "no") + ")");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
