// llmchat.kernels._cpu: what this CPU and OS run, for choosing a kernel level before any is loaded
// (kernels/variants.py). Built for the architecture's baseline and without torch, so it imports everywhere.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../core/cpu_features.h"

namespace {

PyObject* has(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (name == nullptr) return nullptr;  // not a str: the TypeError is set
  return PyBool_FromLong(llmchat::cpu_has(name));
}

PyMethodDef methods[] = {
    {"has", has, METH_O, "has(feature) -> bool: this CPU and OS run it (names of core/cpu_features.cpp)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", "llmchat CPU feature probe", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__cpu(void) { return PyModule_Create(&module); }
