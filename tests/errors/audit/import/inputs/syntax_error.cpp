// A registration file that does not compile: the importer reports Clang's errors and writes nothing.
// (No torch headers: the case stays fast.)
namespace at {
struct Tensor {};
}  // namespace at

at::Tensor broken(const at::Tensor& self) {
  return self
}
