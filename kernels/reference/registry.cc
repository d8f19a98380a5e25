#include "reference.h"

namespace sparkrt::reference {
namespace {

// Registrations happen during static initialisation of this library, before
// any lookup; the list is read-only afterwards.
Registration*& head() {
  static Registration* list = nullptr;
  return list;
}

}  // namespace

detail::Registrar::Registrar(Registration* r) {
  r->next = head();
  head() = r;
}

KernelFn find(std::string_view module, std::string_view entry) {
  for (const Registration* r = head(); r != nullptr; r = r->next) {
    if (module == r->module && entry == r->entry) return r->fn;
  }
  return nullptr;
}

const Registration* all() { return head(); }

}  // namespace sparkrt::reference
