/* Integer attributes of many objects as int64 columns, for cupool.sim.replay_input (and
 * by_type, the objects split by their exact type: a plan's actions by kind).
 *
 * int_columns(objects, names) reads attribute names[c] of every object (a residency's
 * buffer_id, start, end, offset; an action's buffer_id and ops) into one bytearray holding
 * the columns one after the other, each len(objects) int64 values: what
 * numpy.fromiter(map(attrgetter(name), objects), numpy.int64) gives per name, without a
 * Python call per value. Where that could differ (an attribute that is not an int, one past
 * 64 bits, one missing) it returns None, and the caller reads the columns in Python, which
 * converts or raises as it always has. Objects whose class keeps the attribute in a
 * __slots__ member (the plan vocabulary's frozen dataclasses) are read from the slot, as
 * generic attribute lookup would read it, without the lookup.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Where objects of one type keep attribute names[c]: the byte offset of its slot (a
 * __slots__ member: a dataclass with slots=True), or -1 to ask PyObject_GetAttr. A slot is
 * read directly only when the type's attribute is that member descriptor itself, which is
 * what PyObject_GetAttr would have read through. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offsets[8];
} Slots;

static void find_slots(Slots *slots, PyTypeObject *type, PyObject *names, Py_ssize_t width) {
    slots->type = type;
    int generic = type->tp_getattro == PyObject_GenericGetAttr;
    for (Py_ssize_t c = 0; c < width; c++) {
        slots->offsets[c] = -1;
        if (c >= 8 || !generic) continue;
        PyObject *descr = PyObject_GetAttr((PyObject *)type, PyTuple_GET_ITEM(names, c));
        if (!descr) {
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READ_RESTRICTED))
                slots->offsets[c] = member->offset;
        }
        Py_DECREF(descr);
    }
}

static PyObject *int_columns(PyObject *module, PyObject *args) {
    PyObject *objects, *names;
    if (!PyArg_ParseTuple(args, "OO!:int_columns", &objects, &PyTuple_Type, &names))
        return NULL;
    Py_ssize_t width = PyTuple_GET_SIZE(names);
    for (Py_ssize_t c = 0; c < width; c++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, c))) {
            PyErr_SetString(PyExc_TypeError, "int_columns: names must be strings");
            return NULL;
        }
    }
    PyObject *items = PySequence_Fast(objects, "int_columns: objects must be a sequence");
    if (!items) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject *block = PyByteArray_FromStringAndSize(NULL, count * width * 8);
    if (!block) {
        Py_DECREF(items);
        return NULL;
    }
    long long *out = (long long *)PyByteArray_AS_STRING(block);
    PyObject **objs = PySequence_Fast_ITEMS(items);
    Slots slots = {NULL, {0}};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyTypeObject *type = Py_TYPE(objs[i]);
        if (type != slots.type) find_slots(&slots, type, names, width);
        for (Py_ssize_t c = 0; c < width; c++) {
            PyObject *value = NULL;
            Py_ssize_t at = c < 8 ? slots.offsets[c] : -1;
            if (at >= 0) {
                value = *(PyObject **)((char *)objs[i] + at);
                Py_XINCREF(value);  /* NULL: an unset slot, left to Python */
            } else {
                value = PyObject_GetAttr(objs[i], PyTuple_GET_ITEM(names, c));
            }
            int overflow = 0;
            long long number = -1;
            if (value && PyLong_Check(value))
                number = PyLong_AsLongLongAndOverflow(value, &overflow);
            int usable = value && PyLong_Check(value) && !overflow
                         && !(number == -1 && PyErr_Occurred());
            Py_XDECREF(value);
            if (!usable) {
                Py_DECREF(items);
                Py_DECREF(block);
                if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            out[c * count + i] = number;
        }
    }
    Py_DECREF(items);
    return block;
}

/* by_type(objects, types): the objects split by exact type, one list per entry of the
 * tuple types (each list in the objects' order), or None when an object's type is none of
 * them: what appending each object to a dict of lists keyed by type(object) gives. */
static PyObject *by_type(PyObject *module, PyObject *args) {
    PyObject *objects, *types;
    if (!PyArg_ParseTuple(args, "OO!:by_type", &objects, &PyTuple_Type, &types))
        return NULL;
    Py_ssize_t kinds = PyTuple_GET_SIZE(types);
    PyObject *items = PySequence_Fast(objects, "by_type: objects must be a sequence");
    if (!items) return NULL;
    PyObject *out = PyTuple_New(kinds);
    if (!out) {
        Py_DECREF(items);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < kinds; k++) {
        PyObject *list = PyList_New(0);
        if (!list) goto fail;
        PyTuple_SET_ITEM(out, k, list);
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject **objs = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *type = (PyObject *)Py_TYPE(objs[i]);
        Py_ssize_t k = 0;
        while (k < kinds && PyTuple_GET_ITEM(types, k) != type) k++;
        if (k == kinds) {
            Py_DECREF(items);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (PyList_Append(PyTuple_GET_ITEM(out, k), objs[i]) < 0) goto fail;
    }
    Py_DECREF(items);
    return out;
fail:
    Py_DECREF(items);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"by_type", by_type, METH_VARARGS,
     "by_type(objects, types) -> tuple of one list per type (the objects of exactly that "
     "type, in order), or None when an object is of another type."},
    {"int_columns", int_columns, METH_VARARGS,
     "int_columns(objects, names) -> bytearray of len(names) int64 columns of "
     "len(objects) values each (attribute names[c] of every object), or None where Python "
     "should read them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns",
    "Integer attributes of many objects as int64 columns (cupool.sim.replay_input).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
