// Loads tensors from a tensormount mount the C++ way: std::ifstream for the bytes, getxattr(2) for
// dtype and shape. No safetensors library, no JSON parser, and no code for the float formats C++
// lacks (BF16, F16, F8): mount with `-o dtype=f32` and tensormount presents them as float32.
//
//   tensormount -o dtype=f32 MODEL MNT
//   g++ -O2 -std=c++17 loader.cpp -o loader && ./loader MNT/model.tensors model.norm.weight ...
//
// Prints per tensor: NAME DTYPE SHAPE fnv1a64=<hash of the raw bytes> first=<first values, exact>.
// Assumes a little-endian host, as safetensors data is little-endian.
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

using Bytes = std::vector<unsigned char>;

static std::string xattr(const std::string& path, const char* name) {
    char buf[4096];
    ssize_t n = getxattr(path.c_str(), name, buf, sizeof buf);
    if (n < 0) throw std::runtime_error(path + ": " + name + ": " + std::strerror(errno));
    return std::string(buf, n);
}

static uint64_t fnv1a64(const Bytes& bytes) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ULL;
    return h;
}

// Every float has a finite decimal expansion, and glibc's printf prints it exactly.
static std::string exact(double x) {
    char buf[1200];
    std::snprintf(buf, sizeof buf, "%.1100f", x + 0.0);  // + 0.0 turns -0 into 0
    std::string s = buf;
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
}

template <class T>
static T at(const Bytes& b, size_t i) {
    T v;
    std::memcpy(&v, &b[i * sizeof(T)], sizeof(T));
    return v;
}

static size_t width(const std::string& dtype) {
    if (dtype == "F64" || dtype == "I64") return 8;
    if (dtype == "F32" || dtype == "I32") return 4;
    if (dtype == "U8" || dtype == "BOOL") return 1;
    throw std::runtime_error("unsupported dtype " + dtype);
}

static std::string value(const std::string& dtype, const Bytes& b, size_t i) {
    if (dtype == "F64") return exact(at<double>(b, i));
    if (dtype == "F32") return exact(at<float>(b, i));
    if (dtype == "I64") return std::to_string(at<int64_t>(b, i));
    if (dtype == "I32") return std::to_string(at<int32_t>(b, i));
    return std::to_string(b[i]);  // U8, BOOL
}

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: " << argv[0] << " TENSOR_DIR NAME...\n";
        return 2;
    }
    try {
        for (int a = 2; a < argc; a++) {
            std::string path = std::string(argv[1]) + "/" + argv[a];
            std::string dtype = xattr(path, "user.safetensors.dtype");
            std::string shape = xattr(path, "user.safetensors.shape");
            std::ifstream in(path, std::ios::binary);
            if (!in) throw std::runtime_error("cannot open " + path);
            Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            std::string first;
            for (size_t i = 0; i < std::min<size_t>(4, bytes.size() / width(dtype)); i++)
                first += (i ? "," : "") + value(dtype, bytes, i);
            std::printf("%s %s %s fnv1a64=%016llx first=%s\n", argv[a], dtype.c_str(), shape.c_str(),
                        (unsigned long long)fnv1a64(bytes), first.c_str());
        }
    } catch (const std::exception& e) {
        std::cerr << "loader: " << e.what() << "\n";
        return 1;
    }
}
