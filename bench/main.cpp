// The benchmark binary's main: Google Benchmark's, with the host in the report's context, so
// that every table says where it was measured (scripts/lib/summarize.py prints these):
//   cpu_model    /proc/cpuinfo's "model name"
//   isa          the instruction set xsimd compiled for (-march), and the float lanes per batch
//   caches       L1d / L2 / L3 in KiB, from the C library (benchmark's own list is per level too)
#include <benchmark/benchmark.h>
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

std::string caches() {
#if defined(__linux__) && defined(_SC_LEVEL1_DCACHE_SIZE)
    const auto kib = [](int name) { return std::to_string(sysconf(name) / 1024) + " KiB"; };
    return "L1d " + kib(_SC_LEVEL1_DCACHE_SIZE) + ", L2 " + kib(_SC_LEVEL2_CACHE_SIZE) + ", L3 " +
           kib(_SC_LEVEL3_CACHE_SIZE);
#else
    return "unknown";
#endif
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::AddCustomContext("cpu_model", cpu_model());
    benchmark::AddCustomContext("isa", std::string(xsimd::default_arch::name()) + ", " +
                                           std::to_string(xsimd::batch<float>::size) + " float lanes");
    benchmark::AddCustomContext("caches", caches());
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
