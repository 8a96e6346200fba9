/* An int64 array argument of the planning extensions (_greedy.c, _firstfit.c), held
 * through the buffer protocol: get_int64 fills `arg` from `obj` (C-contiguous, 8-byte
 * signed integers; `writable` when the extension writes into it) or sets TypeError
 * naming the argument and returns -1. Release every held view with PyBuffer_Release. */
#ifndef CUPOOL_INT64_ARG_H
#define CUPOOL_INT64_ARG_H

#include <Python.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Arg;

static int get_int64(PyObject *obj, Arg *arg, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &arg->view, flags) < 0) return -1;
    arg->held = 1;
    const char *f = arg->view.format;
    if (arg->view.itemsize != 8 || !f || (strcmp(f, "q") && strcmp(f, "l") &&
                                          strcmp(f, "<q") && strcmp(f, "<l") &&
                                          strcmp(f, "=q") && strcmp(f, "=l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous int64 array", name);
        return -1;
    }
    return 0;
}

#endif
