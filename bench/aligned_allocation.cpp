// Every heap block of the benchmark binary is 64-byte aligned, as PyTorch's CPU
// allocator and Eigen's aligned allocator give tensors: the kernels' buffers
// (std::vector in the benchmark code) then start on a cache line, as a
// trainer's do, instead of wherever malloc's 16-byte header leaves them. A
// row that starts mid-line splits its first and last lines between streaming
// and ordinary stores, which costs what streaming saves.
#include <cstdlib>
#include <new>

void* operator new(std::size_t size) {
    const std::size_t rounded = (size + 63) / 64 * 64;
    if (void* block = std::aligned_alloc(64, rounded == 0 ? 64 : rounded)) return block;
    throw std::bad_alloc();
}

void* operator new[](std::size_t size) { return operator new(size); }

void operator delete(void* block) noexcept { std::free(block); }
void operator delete[](void* block) noexcept { std::free(block); }
void operator delete(void* block, std::size_t) noexcept { std::free(block); }
void operator delete[](void* block, std::size_t) noexcept { std::free(block); }
